//! write: the `write` tool — creates or replaces a file inside the session
//! workdir, creating parent directories, refusing secrets, and replacing the
//! file atomically (temp file in the same directory, fsync, rename) so a
//! crash leaves the old file or the new one, never half of one.
//!
//! It owns [`atomic_write`], which `edit` shares. Confinement is
//! [`super::fs_guard`]'s job and secret detection [`super::secrets`]'.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use serde::Deserialize;

use super::builtin::{OnCancel, parse_args, run_blocking};
use super::{Tool, ToolContext, ToolFuture, ToolOutput};
use super::{fs_guard, secrets};

const EXPECTED: &str = "{\"path\": string, \"content\": string}";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    path: String,
    content: String,
}

pub struct WriteTool;

impl Tool for WriteTool {
    fn name(&self) -> &'static str {
        "write"
    }

    fn description(&self) -> &'static str {
        "Creates a file, or replaces a file's whole content, inside the session workdir. \
         Missing parent directories are created. The path is relative to the workdir. \
         Prefer `edit` for changing part of an existing file. Content that contains a \
         secret (API keys, tokens, private keys) is refused: read such values from the \
         environment at run time instead."
    }

    fn input_schema(&self) -> &'static str {
        r#"{
  "type": "object",
  "properties": {
    "path": {"type": "string", "description": "File to write, relative to the session workdir."},
    "content": {"type": "string", "description": "The complete new content of the file."}
  },
  "required": ["path", "content"],
  "additionalProperties": false
}"#
    }

    fn concurrency_safe(&self, _args_json: &str) -> bool {
        false
    }

    fn call<'a>(&'a self, ctx: &'a ToolContext, args_json: &'a str) -> ToolFuture<'a> {
        Box::pin(async move {
            let args: Args = match parse_args("write", args_json, EXPECTED) {
                Ok(args) => args,
                Err(out) => return out,
            };
            let path = match fs_guard::resolve(&ctx.workdir, &args.path) {
                Ok(path) => path,
                Err(err) => return ToolOutput::error(err.to_string()),
            };
            let shown = fs_guard::display_rel(&ctx.workdir, &path);
            run_blocking(ctx, "write", OnCancel::Finish, move |_| {
                write_file(&path, &shown, &args.content)
            })
            .await
        })
    }
}

fn write_file(path: &Path, shown: &str, content: &str) -> ToolOutput {
    let before = match fs::metadata(path) {
        Ok(meta) if meta.is_dir() => {
            return ToolOutput::error(format!(
                "{shown} is a directory: give the path of a file inside it"
            ));
        }
        // Lossy is enough: only used to tell secrets already in the file
        // from new ones.
        Ok(_) => match fs::read(path) {
            Ok(bytes) => Some(String::from_utf8_lossy(&bytes).into_owned()),
            Err(err) => {
                return ToolOutput::error(format!("cannot read {shown} to replace it: {err}"));
            }
        },
        Err(_) => None,
    };
    if let Some(found) = secrets::scan_new(before.as_deref().unwrap_or(""), content) {
        return ToolOutput::error(found.refusal(shown));
    }
    if let Some(parent) = path.parent()
        && let Err(err) = fs::create_dir_all(parent)
    {
        return ToolOutput::error(format!(
            "cannot create the directories for {shown}: {err} (is part of the path an existing \
             file?)"
        ));
    }
    if let Err(err) = atomic_write(path, content.as_bytes()) {
        return ToolOutput::error(format!("cannot write {shown}: {err}"));
    }
    let lines = content.lines().count();
    let what = match before {
        None => "new file".to_string(),
        Some(old) => format!("replaced the previous {} bytes", old.len()),
    };
    ToolOutput::ok(format!(
        "wrote {} bytes ({lines} lines) to {shown} ({what})",
        content.len()
    ))
}

/// Replaces `path` with `content` atomically: a new temp file next to it
/// (created exclusively, so a planted symlink is never followed), the old
/// file's permissions, fsync, rename, then fsync of the directory so the
/// rename itself survives a crash.
pub(crate) fn atomic_write(path: &Path, content: &[u8]) -> io::Result<()> {
    let perms = fs::metadata(path).ok().map(|m| m.permissions());
    atomic_write_as(path, content, perms)
}

/// [`atomic_write`] with the given permissions (`None`: the umask's).
pub(crate) fn atomic_write_as(
    path: &Path,
    content: &[u8],
    perms: Option<fs::Permissions>,
) -> io::Result<()> {
    let tmp = fs_guard::temp_sibling(path);
    let result = (|| {
        // The final mode from the start, so the data is never readable by
        // more than it will be (0o666 is std's default).
        let mode = perms.as_ref().map_or(0o666, |p| p.mode());
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        file.write_all(content)?;
        if let Some(perms) = perms {
            file.set_permissions(perms)?;
        }
        file.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        // Best effort: the temp file is ours and useless now.
        let _ = fs::remove_file(&tmp);
        return result;
    }
    if let Some(dir) = path.parent()
        && let Ok(dir) = File::open(dir)
    {
        // The data is in place; a failed directory sync only weakens crash
        // durability, so it does not fail the write.
        let _ = dir.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::builtin::test_support::{call, ctx, fake_github_token};
    use serde_json::json;
    use std::os::unix::fs::{PermissionsExt, symlink};

    #[tokio::test]
    async fn creates_parents_and_reports_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let c = ctx(dir.path());
        let out = call(
            &WriteTool,
            &c,
            json!({"path": "a/b/c.txt", "content": "hello\nworld\n"}),
        )
        .await;
        assert!(!out.is_error, "{out:?}");
        assert!(
            out.content
                .contains("wrote 12 bytes (2 lines) to a/b/c.txt (new file)"),
            "{}",
            out.content
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a/b/c.txt")).unwrap(),
            "hello\nworld\n"
        );
        let out = call(&WriteTool, &c, json!({"path": "a/b/c.txt", "content": "x"})).await;
        assert!(
            out.content.contains("replaced the previous 12 bytes"),
            "{}",
            out.content
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a/b/c.txt")).unwrap(),
            "x"
        );
        // No temp files left behind.
        let names: Vec<_> = std::fs::read_dir(dir.path().join("a/b")).unwrap().collect();
        assert_eq!(names.len(), 1);
    }

    #[tokio::test]
    async fn keeps_permissions_of_the_replaced_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("run.sh");
        std::fs::write(&p, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        let out = call(
            &WriteTool,
            &ctx(dir.path()),
            json!({"path": "run.sh", "content": "#!/bin/sh\necho\n"}),
        )
        .await;
        assert!(!out.is_error, "{out:?}");
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o755
        );
    }

    #[tokio::test]
    async fn refuses_secrets_without_echoing_them() {
        let dir = tempfile::tempdir().unwrap();
        let token = fake_github_token();
        let content = format!("# config\nTOKEN = \"{token}\"\n");
        let out = call(
            &WriteTool,
            &ctx(dir.path()),
            json!({"path": "cfg.py", "content": content}),
        )
        .await;
        assert!(out.is_error, "{out:?}");
        assert!(
            out.content.contains("github-token") && out.content.contains("line 2"),
            "{}",
            out.content
        );
        assert!(!out.content.contains(&token));
        assert!(!out.content.contains(&token[..12]));
        assert!(!dir.path().join("cfg.py").exists());
    }

    #[tokio::test]
    async fn refuses_escapes_including_through_a_symlinked_parent_dir() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let c = ctx(dir.path());
        for path in ["../x.txt", "sub/../../x.txt"] {
            let out = call(&WriteTool, &c, json!({"path": path, "content": "x"})).await;
            assert!(
                out.is_error && out.content.contains("outside the session workdir"),
                "{out:?}"
            );
        }
        let abs = outside.path().join("abs.txt");
        let out = call(
            &WriteTool,
            &c,
            json!({"path": abs.to_str().unwrap(), "content": "x"}),
        )
        .await;
        assert!(out.is_error, "{out:?}");
        assert!(!abs.exists());

        symlink(outside.path(), dir.path().join("linkdir")).unwrap();
        let out = call(
            &WriteTool,
            &c,
            json!({"path": "linkdir/new/f.txt", "content": "x"}),
        )
        .await;
        assert!(out.is_error && out.content.contains("symlink"), "{out:?}");
        assert!(!outside.path().join("new").exists());

        std::fs::write(outside.path().join("target.txt"), "orig").unwrap();
        symlink(outside.path().join("target.txt"), dir.path().join("l.txt")).unwrap();
        let out = call(&WriteTool, &c, json!({"path": "l.txt", "content": "x"})).await;
        assert!(out.is_error, "{out:?}");
        assert_eq!(
            std::fs::read_to_string(outside.path().join("target.txt")).unwrap(),
            "orig"
        );
    }

    #[tokio::test]
    async fn writing_through_an_inside_symlink_replaces_its_target() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("real.txt"), "old").unwrap();
        symlink("real.txt", dir.path().join("alias.txt")).unwrap();
        let out = call(
            &WriteTool,
            &ctx(dir.path()),
            json!({"path": "alias.txt", "content": "new"}),
        )
        .await;
        assert!(!out.is_error, "{out:?}");
        assert!(
            std::fs::symlink_metadata(dir.path().join("alias.txt"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("real.txt")).unwrap(),
            "new"
        );
    }

    #[tokio::test]
    async fn a_directory_or_a_file_parent_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        std::fs::write(dir.path().join("f"), "").unwrap();
        let c = ctx(dir.path());
        let out = call(&WriteTool, &c, json!({"path": "d", "content": "x"})).await;
        assert!(
            out.is_error && out.content.contains("is a directory"),
            "{out:?}"
        );
        let out = call(&WriteTool, &c, json!({"path": "f/x.txt", "content": "x"})).await;
        assert!(
            out.is_error && out.content.contains("cannot create the directories"),
            "{out:?}"
        );
    }
}
