//! The shared store's PostgreSQL side: connecting (a pool whose every
//! connection carries statement, lock and idle-in-transaction timeouts),
//! numbered migrations applied under an advisory lock, and the primitives
//! several daemons coordinate through: step claims with fencing tokens and
//! leases (`claims.rs`), plans whose state follows from their steps'
//! (`plans.rs`); the jobs room keeps its rows itself (job fires keyed by
//! (job, instant), in `jobs/shared.rs`).
//! It knows no room's records beyond the rows these primitives need; all
//! lease times are the database's clock.

pub mod claims;
pub mod imports;
pub mod listen;
mod migrate;
pub mod plans;
pub mod tls;

pub use migrate::{LATEST, MIGRATIONS, Migrated, migrate};

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use std::time::Duration;

/// Where a URL points, for messages (never its password).
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub dbname: String,
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{} (database {}, user {})",
            self.host, self.port, self.dbname, self.user
        )
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PgError {
    #[error(
        "the database URL is not valid ({0}): write it as postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE"
    )]
    Url(String),
    #[error(
        "cannot connect to PostgreSQL at {target}: {detail}; check the URL (--database-url or FLYTO_DATABASE_URL) and that the server runs and admits this user"
    )]
    Connect { target: Target, detail: String },
    #[error(
        "the database's schema is at version {found}, newer than this flytod knows ({known}): upgrade flytod on this node before starting it"
    )]
    SchemaNewer { found: i32, known: i32 },
    #[error("PostgreSQL at {target}: {what} failed: {detail}")]
    Query {
        target: Target,
        what: &'static str,
        detail: String,
    },
}

/// Statement, lock and idle-in-transaction timeouts: a stuck query or a
/// forgotten transaction must not hold rows (or a node) forever.
const SESSION_OPTIONS: &str =
    "-c statement_timeout=30000 -c lock_timeout=10000 -c idle_in_transaction_session_timeout=60000";

/// The error text of `e` without anything that could hold a secret: the
/// database's own message (its severity and text), or the I/O cause.
pub(crate) fn detail(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!("{} {}", db.severity(), db.message());
    }
    let mut out = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        out = format!("{out}: {s}");
        source = s.source();
    }
    out
}

/// A shared store: its pool, and where it is (for messages).
#[derive(Clone)]
pub struct Shared {
    pub pool: Pool,
    pub target: Target,
    /// The connection settings, for connections outside the pool (the
    /// listener's).
    pub config: tokio_postgres::Config,
    /// How connections make TLS, as the URL's `sslmode` asks.
    pub tls: tls::Connector,
}

impl Shared {
    /// A pool on `url` whose connections name themselves `application`
    /// (so a node's sessions can be told apart in `pg_stat_activity`);
    /// one connection is made at once, so a bad URL or credentials show
    /// here, with the host, port, user and what failed.
    pub async fn connect(url: &str, application: &str) -> Result<Shared, PgError> {
        let (url, wanted) = tls::split(url)?;
        let tls = tls::connector(&wanted)?;
        let mut config: tokio_postgres::Config = url
            .parse()
            .map_err(|e: tokio_postgres::Error| PgError::Url(detail(&e)))?;
        let host = config
            .get_hosts()
            .first()
            .map(|h| match h {
                tokio_postgres::config::Host::Tcp(h) => h.clone(),
                tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
            })
            .unwrap_or_else(|| "localhost".into());
        let target = Target {
            host,
            port: config.get_ports().first().copied().unwrap_or(5432),
            user: config.get_user().unwrap_or("(the OS user)").to_string(),
            dbname: config
                .get_dbname()
                .or(config.get_user())
                .unwrap_or("postgres")
                .to_string(),
        };
        config
            .application_name(application)
            .options(SESSION_OPTIONS)
            .connect_timeout(Duration::from_secs(10));
        let manager = Manager::from_config(
            config.clone(),
            tls.clone(),
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(16)
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .wait_timeout(Some(Duration::from_secs(30)))
            .create_timeout(Some(Duration::from_secs(15)))
            .build()
            .map_err(|e| PgError::Url(e.to_string()))?;
        let shared = Shared {
            pool,
            target,
            config,
            tls,
        };
        drop(shared.client().await?);
        Ok(shared)
    }

    /// A pooled connection, or why there is none.
    pub async fn client(&self) -> Result<deadpool_postgres::Object, PgError> {
        self.pool.get().await.map_err(|e| {
            let detail = match &e {
                deadpool_postgres::PoolError::Backend(pg) => detail(pg),
                other => other.to_string(),
            };
            PgError::Connect {
                target: self.target.clone(),
                detail,
            }
        })
    }

    pub(crate) fn query_err(
        &self,
        what: &'static str,
    ) -> impl Fn(tokio_postgres::Error) -> PgError + '_ {
        move |e| PgError::Query {
            target: self.target.clone(),
            what,
            detail: detail(&e),
        }
    }
}
