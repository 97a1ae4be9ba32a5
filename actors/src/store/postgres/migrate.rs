//! Numbered SQL migrations, applied in order inside one transaction that
//! holds a transaction-scoped advisory lock: two daemons starting at once
//! apply each migration once (the second waits, then finds nothing to do).
//! A database whose schema is newer than this binary is refused.

use super::{PgError, Shared};

/// (version, SQL), in order.
pub const MIGRATIONS: &[(i32, &str)] = &[
    (1, include_str!("migrations/0001_shared_store.sql")),
    (2, include_str!("migrations/0002_plan_steps.sql")),
    (3, include_str!("migrations/0003_attempt_stopped.sql")),
    (4, include_str!("migrations/0004_step_depth_and_log.sql")),
    (5, include_str!("migrations/0005_imports.sql")),
    (6, include_str!("migrations/0006_jobs.sql")),
    (7, include_str!("migrations/0007_sessions.sql")),
    (8, include_str!("migrations/0008_channels.sql")),
    (9, include_str!("migrations/0009_memory.sql")),
    (10, include_str!("migrations/0010_plan_finished.sql")),
];

/// The schema version this binary knows.
pub const LATEST: i32 = 10;

/// Any constant shared by every flytod: the lock only has to be the same.
const MIGRATION_LOCK: i64 = 0x666c_7974_6f5f_6d67;

/// What a run of [`migrate`] did.
#[derive(Debug, Clone, PartialEq)]
pub struct Migrated {
    /// The versions this call applied (none when another had).
    pub applied: Vec<i32>,
    /// The schema version now.
    pub version: i32,
}

pub async fn migrate(shared: &Shared) -> Result<Migrated, PgError> {
    let mut client = shared.client().await?;
    let err = shared.query_err("migrating the schema");
    let tx = client.transaction().await.map_err(&err)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(&err)?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS flyto_schema (
             version     integer PRIMARY KEY,
             applied_at  timestamptz NOT NULL DEFAULT now()
         )",
    )
    .await
    .map_err(&err)?;
    let found: i32 = tx
        .query_one("SELECT coalesce(max(version), 0) FROM flyto_schema", &[])
        .await
        .map_err(&err)?
        .get(0);
    if found > LATEST {
        return Err(PgError::SchemaNewer {
            found,
            known: LATEST,
        });
    }
    let mut applied = Vec::new();
    for (version, sql) in MIGRATIONS.iter().filter(|(v, _)| *v > found) {
        tx.batch_execute(sql).await.map_err(&err)?;
        tx.execute("INSERT INTO flyto_schema (version) VALUES ($1)", &[version])
            .await
            .map_err(&err)?;
        applied.push(*version);
    }
    tx.commit().await.map_err(&err)?;
    Ok(Migrated {
        version: applied.last().copied().unwrap_or(found),
        applied,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_are_numbered_in_order_and_end_at_latest() {
        let versions: Vec<i32> = MIGRATIONS.iter().map(|(v, _)| *v).collect();
        let expected: Vec<i32> = (1..=LATEST).collect();
        assert_eq!(versions, expected);
        assert!(MIGRATIONS.iter().all(|(_, sql)| !sql.trim().is_empty()));
    }
}
