//! What every copy of a one-machine store (`flytod migrate --from-sled`)
//! shares: each part of a store is copied once (a row in `flyto_imports`
//! per source and part), each record under a new id, and a name the
//! shared store already has is not taken twice.

use deadpool_postgres::Transaction;

/// What the copy of one record did.
#[derive(Debug, Clone, PartialEq)]
pub struct Copied {
    pub old: u64,
    pub new: u64,
    /// Its name was another record's on the shared store: copied without.
    pub name_dropped: Option<String>,
}

/// Marks `part` of `source` copied, in `tx`; `false` when it was before.
pub async fn first_copy(
    tx: &Transaction<'_>,
    source: &str,
    part: &str,
    count: usize,
) -> Result<bool, tokio_postgres::Error> {
    let n = tx
        .execute(
            "INSERT INTO flyto_imports (source, plans) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            &[
                &format!("{source} ({part})"),
                &(count.min(i32::MAX as usize) as i32),
            ],
        )
        .await?;
    Ok(n == 1)
}

/// The next value of `sequence` (a trusted identifier).
pub async fn next_value(
    tx: &Transaction<'_>,
    sequence: &str,
) -> Result<u64, tokio_postgres::Error> {
    let row = tx
        .query_one(&format!("SELECT nextval('{sequence}')"), &[])
        .await?;
    Ok(row.get::<_, i64>(0) as u64)
}

/// `name` taken from `*name` when `table` (a trusted identifier) has a
/// row of that name already: the copy goes without it.
pub async fn drop_taken_name(
    tx: &Transaction<'_>,
    table: &str,
    name: &mut Option<String>,
) -> Result<Option<String>, tokio_postgres::Error> {
    let Some(n) = name.as_deref() else {
        return Ok(None);
    };
    let taken = tx
        .query_opt(&format!("SELECT 1 FROM {table} WHERE name = $1"), &[&n])
        .await?
        .is_some();
    Ok(if taken { name.take() } else { None })
}
