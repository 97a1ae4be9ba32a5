//! A refused request: the code the client sees and a sentence the user
//! can act on. Every room answers refusals in these words.

use flyto_protocol::ErrorCode;

/// A boxed future of a store's answer: the store may be this node's disk
/// or a database other nodes share, behind one trait.
pub type AnswerFut<'a, T> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<T, Reject>> + Send + 'a>>;

/// A refused request: the code and a sentence the user can act on.
#[derive(Debug, Clone, PartialEq)]
pub struct Reject {
    pub code: ErrorCode,
    pub message: String,
}

impl std::fmt::Display for Reject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl Reject {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Reject {
            code,
            message: message.into(),
        }
    }
    pub fn internal(e: impl std::fmt::Display) -> Self {
        Reject::new(ErrorCode::Internal, e.to_string())
    }
    /// At most this many of the plans sharing a name are listed.
    pub const NAMES_SHOWN: usize = 10;

    /// `total` plans are named `key`; `named` lists the first of them.
    pub fn ambiguous(key: &str, total: usize, mut named: Vec<String>) -> Self {
        if total > named.len() {
            named.push(format!("and {} more", total - named.len()));
        }
        Reject::new(
            ErrorCode::BadRequest,
            format!(
                "{total} plans are named `{key}`: {}; give the id of the one you mean",
                named.join(", ")
            ),
        )
    }

    pub fn not_found(id: &str) -> Self {
        Reject::new(
            ErrorCode::NotFound,
            format!(
                "no plan `{id}`: it may have expired after plans.plan_ttl; `flytoctl plan_list` shows the plans that exist"
            ),
        )
    }
}
