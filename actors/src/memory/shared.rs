//! Memory on the shared store. Each scope's files (entries, `MEMORY.md`,
//! tombstones under `.trash/`) are rows; a node's scope folder is a
//! working copy of them. Before each message its scope actor brings the
//! folder up to the database's generation of the scope (`pull`); after a
//! change it writes the whole folder back under a compare-and-set of the
//! generation it read (`push`). A push that finds the generation moved
//! (another node changed the scope meanwhile) writes nothing: the actor
//! pulls and makes its change again on what the other node wrote, so no
//! node's update is lost.
//!
//! Nothing anyone wrote is dropped silently: a file changed in the folder
//! by hand since the last sync is copied to `memory.local-edits/<time>/`
//! beside the folder before a pull replaces it (people edit through
//! `flytoctl memory_export` / `memory_import` in this mode); a folder
//! that holds entries while the database has none for its scope is
//! adopted (pushed) on first use.
//!
//! It may not parse entries: it moves bytes. `.version.json` (a version's
//! bookkeeping, which names this node's version folders) stays local.

use super::MemoryError;
use super::store::io_err;
use crate::store::postgres::{PgError, Shared};
use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Files a scope folder keeps to itself.
const LOCAL_ONLY: &[&str] = &[super::versions::META];

/// relative path → bytes.
pub type Files = BTreeMap<String, Vec<u8>>;

pub struct SharedMemory {
    shared: Shared,
    handle: tokio::runtime::Handle,
}

fn unavailable(e: impl std::fmt::Display) -> MemoryError {
    MemoryError::Unavailable(format!("the shared store: {e}"))
}

impl SharedMemory {
    /// Must be made inside the runtime, whose handle it keeps.
    pub fn new(shared: Shared) -> SharedMemory {
        SharedMemory {
            shared,
            handle: tokio::runtime::Handle::current(),
        }
    }

    fn block<T>(&self, f: impl Future<Output = Result<T, PgError>>) -> Result<T, MemoryError> {
        tokio::task::block_in_place(|| self.handle.block_on(f)).map_err(unavailable)
    }

    /// The scope's generation (0: never written) and, when it is not
    /// `have`, its files, read in one snapshot.
    pub fn pull(&self, scope: &str, have: i64) -> Result<(i64, Option<Files>), MemoryError> {
        self.block(async {
            let err = self.shared.query_err("reading memory");
            let mut c = self.shared.client().await?;
            let tx = c
                .build_transaction()
                .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
                .read_only(true)
                .start()
                .await
                .map_err(&err)?;
            let generation: i64 = tx
                .query_opt(
                    "SELECT generation FROM flyto_memory_scopes WHERE scope = $1",
                    &[&scope],
                )
                .await
                .map_err(&err)?
                .map_or(0, |r| r.get(0));
            if generation == have {
                return Ok((generation, None));
            }
            let rows = tx
                .query(
                    "SELECT path, content FROM flyto_memory_files WHERE scope = $1",
                    &[&scope],
                )
                .await
                .map_err(&err)?;
            tx.commit().await.map_err(&err)?;
            Ok((
                generation,
                Some(rows.iter().map(|r| (r.get(0), r.get(1))).collect()),
            ))
        })
    }

    /// Replaces the scope's files if its generation is still `base`; the
    /// new generation, or `None` when another node wrote first.
    pub fn push(&self, scope: &str, base: i64, files: &Files) -> Result<Option<i64>, MemoryError> {
        self.block(async {
            let err = self.shared.query_err("writing memory");
            let mut c = self.shared.client().await?;
            let tx = c.transaction().await.map_err(&err)?;
            let moved = if base == 0 {
                tx.execute(
                    "INSERT INTO flyto_memory_scopes (scope, generation) VALUES ($1, 1)
                     ON CONFLICT (scope) DO NOTHING",
                    &[&scope],
                )
                .await
            } else {
                tx.execute(
                    "UPDATE flyto_memory_scopes SET generation = generation + 1
                     WHERE scope = $1 AND generation = $2",
                    &[&scope, &base],
                )
                .await
            }
            .map_err(&err)?;
            if moved == 0 {
                return Ok(None);
            }
            tx.execute("DELETE FROM flyto_memory_files WHERE scope = $1", &[&scope])
                .await
                .map_err(&err)?;
            let paths: Vec<&str> = files.keys().map(String::as_str).collect();
            let contents: Vec<&[u8]> = files.values().map(Vec::as_slice).collect();
            tx.execute(
                "INSERT INTO flyto_memory_files (scope, path, content)
                 SELECT $1, * FROM unnest($2::text[], $3::bytea[])",
                &[&scope, &paths, &contents],
            )
            .await
            .map_err(&err)?;
            tx.commit().await.map_err(&err)?;
            Ok(Some(base + 1))
        })
    }

    /// Every scope the database holds (`user`, `project/<id>`).
    pub async fn scopes(&self) -> Result<Vec<String>, PgError> {
        let c = self.shared.client().await?;
        let rows = c
            .query("SELECT scope FROM flyto_memory_scopes ORDER BY scope", &[])
            .await
            .map_err(self.shared.query_err("listing memory scopes"))?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// Takes `project`'s dream lease for `run` on `node` when it is free
    /// (or its holder's ran out); whether it was taken.
    pub async fn take_dream_lease(
        &self,
        project: &str,
        node: &str,
        run: &str,
        lease: Duration,
    ) -> Result<bool, PgError> {
        let c = self.shared.client().await?;
        let n = c
            .execute(
                "INSERT INTO flyto_dream_leases (project, node, run, until)
                 VALUES ($1, $2, $3, now() + make_interval(secs => $4))
                 ON CONFLICT (project) DO UPDATE
                     SET node = EXCLUDED.node, run = EXCLUDED.run, until = EXCLUDED.until
                     WHERE flyto_dream_leases.until < now()",
                &[&project, &node, &run, &lease.as_secs_f64()],
            )
            .await
            .map_err(self.shared.query_err("taking a dream lease"))?;
        Ok(n == 1)
    }

    /// The node holding `project`'s live dream lease, if any.
    pub async fn dream_holder(&self, project: &str) -> Result<Option<String>, PgError> {
        let c = self.shared.client().await?;
        let row = c
            .query_opt(
                "SELECT node FROM flyto_dream_leases WHERE project = $1 AND until > now()",
                &[&project],
            )
            .await
            .map_err(self.shared.query_err("reading a dream lease"))?;
        Ok(row.map(|r| r.get(0)))
    }

    pub async fn drop_dream_lease(&self, project: &str, run: &str) -> Result<(), PgError> {
        let c = self.shared.client().await?;
        c.execute(
            "DELETE FROM flyto_dream_leases WHERE project = $1 AND run = $2",
            &[&project, &run],
        )
        .await
        .map_err(self.shared.query_err("dropping a dream lease"))?;
        Ok(())
    }
}

/// A scope folder's link to its rows: the generation it holds and the
/// files as last synced (to tell edits by hand from synced content).
pub struct ScopeSync {
    pub mem: std::sync::Arc<SharedMemory>,
    pub scope: String,
    generation: Option<i64>,
    synced: Files,
}

/// Every shared file under `dir`, by path relative to it.
pub fn read_folder(dir: &Path) -> Result<Files, MemoryError> {
    let mut out = Files::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let rd = match fs::read_dir(dir.join(&rel)) {
            Ok(rd) => rd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io_err("list", &dir.join(&rel), e)),
        };
        for d in rd.filter_map(|d| d.ok()) {
            let name = d.file_name().to_string_lossy().into_owned();
            let path = rel.join(&name);
            let Ok(t) = d.file_type() else { continue };
            if t.is_dir() {
                stack.push(path);
            } else if t.is_file() && !LOCAL_ONLY.contains(&name.as_str()) && !name.ends_with(".tmp")
            {
                let bytes = fs::read(d.path()).map_err(|e| io_err("read", &d.path(), e))?;
                out.insert(path.to_string_lossy().into_owned(), bytes);
            }
        }
    }
    Ok(out)
}

fn write_file(dir: &Path, rel: &str, bytes: &[u8]) -> Result<(), MemoryError> {
    let path = dir.join(rel);
    if let Some(parent) = path.parent() {
        crate::durable::create_dir_all_synced(parent).map_err(|e| io_err("create", parent, e))?;
        let _ = fs::set_permissions(parent, fs::Permissions::from_mode(0o700));
    }
    crate::tools::write::atomic_write_as(&path, bytes, Some(fs::Permissions::from_mode(0o600)))
        .map_err(|e| io_err("write", &path, e))
}

/// Whether `rel` is a plain relative path inside the folder.
fn contained(rel: &str) -> bool {
    let p = Path::new(rel);
    !rel.is_empty()
        && p.components()
            .all(|c| matches!(c, std::path::Component::Normal(_)))
}

impl ScopeSync {
    pub fn new(mem: std::sync::Arc<SharedMemory>, scope: String) -> ScopeSync {
        ScopeSync {
            mem,
            scope,
            generation: None,
            synced: Files::new(),
        }
    }

    /// Brings `dir` up to the database's generation; whether it changed.
    /// `keep_edits`: copy what was edited by hand aside first (false when
    /// the changes are this node's own, being redone after a conflict).
    pub fn pull(&mut self, dir: &Path, keep_edits: bool) -> Result<bool, MemoryError> {
        let have = self.generation.unwrap_or(-1);
        let (generation, files) = self.mem.pull(&self.scope, have)?;
        let Some(files) = files else {
            return Ok(false);
        };
        let local = read_folder(dir)?;
        if self.generation.is_none() && generation == 0 {
            // Never written to the database: this folder's entries (from
            // before the shared store) become the scope's first content.
            self.generation = Some(0);
            self.synced = Files::new();
            if !local.is_empty() {
                self.push(dir)?;
            }
            return Ok(false);
        }
        let edited: Vec<&String> = local
            .iter()
            .filter(|(k, v)| {
                files.get(*k) != Some(*v)
                    && (self.generation.is_none() || self.synced.get(*k) != Some(*v))
            })
            .map(|(k, _)| k)
            .collect();
        if keep_edits && !edited.is_empty() {
            let aside = dir
                .parent()
                .unwrap_or(dir)
                .join("memory.local-edits")
                .join(chrono::Utc::now().format("%Y%m%dT%H%M%S%.3fZ").to_string());
            for k in &edited {
                write_file(&aside, k, &local[*k])?;
            }
            tracing::warn!(
                scope = %self.scope, folder = %aside.display(), files = edited.len(),
                "memory files changed by hand in this node's folder were copied aside before the shared memory replaced them: import them with `flytoctl memory_import`"
            );
        }
        crate::durable::create_dir_all_synced(dir).map_err(|e| io_err("create", dir, e))?;
        let _ = fs::set_permissions(dir, fs::Permissions::from_mode(0o700));
        for (k, v) in &files {
            if !contained(k) {
                tracing::warn!(scope = %self.scope, path = %k, "skipped a memory row whose path leaves its folder");
                continue;
            }
            if local.get(k) != Some(v) {
                write_file(dir, k, v)?;
            }
        }
        for k in local.keys().filter(|k| !files.contains_key(*k)) {
            let path = dir.join(k);
            fs::remove_file(&path).map_err(|e| io_err("remove", &path, e))?;
        }
        self.generation = Some(generation);
        self.synced = files;
        Ok(true)
    }

    /// Writes `dir` back; `false` when another node wrote the scope first.
    pub fn push(&mut self, dir: &Path) -> Result<bool, MemoryError> {
        let files = read_folder(dir)?;
        if self.generation.is_some() && files == self.synced {
            return Ok(true);
        }
        let base = self.generation.unwrap_or(0);
        match self.mem.push(&self.scope, base, &files)? {
            Some(generation) => {
                self.generation = Some(generation);
                self.synced = files;
                Ok(true)
            }
            None => Ok(false),
        }
    }
}
