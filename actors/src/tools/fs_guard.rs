//! fs_guard: workdir confinement for the file tools. Turns a path the model
//! gave into a path the tool may open, or an error the model can act on.
//!
//! It owns the rule "file tools only work inside the session workdir": no
//! escape through `..`, absolute paths elsewhere, or symlinks (in any
//! component, the final one included, and for files that do not exist yet).
//! It only looks at the file system (`lstat`, `readlink`, `canonicalize`);
//! it never opens, creates or changes anything, and it knows nothing about
//! the tools that use it.
//!
//! The check is not race-free against a process that swaps a directory for a
//! symlink between the check and the use; it guards against mistakes and
//! injected paths from the model, not against a hostile local process (which
//! `bash` and its permission policy govern).

use std::ffi::OsString;
use std::io;
use std::path::{Component, Path, PathBuf};

/// Symlinks followed in one resolution before giving up, as Linux's ELOOP.
const MAX_SYMLINKS: u32 = 40;

#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    #[error(
        "no path given: pass a file path relative to the session workdir {}",
        workdir.display()
    )]
    Empty { workdir: PathBuf },
    #[error(
        "path {path} starts with `~`, which file tools do not expand: pass a path relative to \
         the session workdir {}",
        workdir.display()
    )]
    Tilde { path: String, workdir: PathBuf },
    #[error(
        "path {path} is outside the session workdir {}: file tools only work inside it",
        workdir.display()
    )]
    Outside { path: String, workdir: PathBuf },
    #[error(
        "path {path} goes through a symlink and resolves to {}, which is outside the session \
         workdir {}: file tools only work inside it, and do not follow symlinks out of it",
        target.display(),
        workdir.display()
    )]
    SymlinkOutside {
        path: String,
        target: PathBuf,
        workdir: PathBuf,
    },
    #[error(
        "path {path} goes through more than {MAX_SYMLINKS} symlinks (a loop?): pass the \
         file's real path"
    )]
    SymlinkLoop { path: String },
    #[error(
        "the session workdir {} cannot be opened ({source}): file tools need an existing \
         workdir; create it or start the session with another one",
        workdir.display()
    )]
    Workdir { workdir: PathBuf, source: io::Error },
}

/// Resolves `path` (relative to `workdir`, or absolute) to a path with every
/// existing component's symlinks expanded, and checks that it lies inside the
/// canonical workdir. The result is what the tool must open: using it avoids
/// the kernel re-resolving `..` differently from this check.
///
/// A path that does not exist yet is fine (for `write`): its existing part
/// is resolved and the rest appended.
pub fn resolve(workdir: &Path, path: &str) -> Result<PathBuf, GuardError> {
    let root = std::fs::canonicalize(workdir).map_err(|source| GuardError::Workdir {
        workdir: workdir.to_path_buf(),
        source,
    })?;
    if path.trim().is_empty() {
        return Err(GuardError::Empty { workdir: root });
    }
    if path.starts_with('~') {
        return Err(GuardError::Tilde {
            path: path.to_string(),
            workdir: root,
        });
    }
    let candidate = root.join(path);
    let mut symlinks = 0;
    let mut via_symlink = false;
    let resolved =
        walk(&candidate, &mut symlinks, &mut via_symlink).map_err(|_| GuardError::SymlinkLoop {
            path: path.to_string(),
        })?;
    if resolved.starts_with(&root) {
        Ok(resolved)
    } else if via_symlink {
        Err(GuardError::SymlinkOutside {
            path: path.to_string(),
            target: resolved,
            workdir: root,
        })
    } else {
        Err(GuardError::Outside {
            path: path.to_string(),
            workdir: root,
        })
    }
}

/// The loop marker of [`walk`]; the caller names the path.
struct TooManySymlinks;

/// `realpath` that tolerates missing components: walks `path` component by
/// component, keeping `out` free of symlinks so that `..` can be applied by
/// popping (which is exact on a symlink-free path). Missing components are
/// appended as they are: they cannot be symlinks.
fn walk(
    path: &Path,
    symlinks: &mut u32,
    via_symlink: &mut bool,
) -> Result<PathBuf, TooManySymlinks> {
    let mut out = PathBuf::from("/");
    for comp in path.components() {
        match comp {
            Component::Prefix(_) | Component::RootDir => out = PathBuf::from("/"),
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(name) => {
                let next = out.join(name);
                match std::fs::symlink_metadata(&next) {
                    Ok(meta) if meta.file_type().is_symlink() => {
                        *symlinks += 1;
                        *via_symlink = true;
                        if *symlinks > MAX_SYMLINKS {
                            return Err(TooManySymlinks);
                        }
                        match std::fs::read_link(&next) {
                            // A relative target is relative to the link's
                            // directory, which is `out`.
                            Ok(target) => out = walk(&out.join(target), symlinks, via_symlink)?,
                            // Unreadable link: keep it; the open will fail
                            // with the OS's reason.
                            Err(_) => out = next,
                        }
                    }
                    // Exists, or missing, or not checkable (EACCES, ENOTDIR):
                    // in each case the name is taken literally and the tool's
                    // own I/O reports any problem.
                    _ => out = next,
                }
            }
        }
    }
    Ok(out)
}

/// `path` as the model should see it in results: relative to the workdir
/// when inside it (`src/main.rs`), as is otherwise.
pub fn display_rel(workdir: &Path, path: &Path) -> String {
    // The context's workdir is canonical already; canonicalising only when
    // it is not keeps this cheap for grep, which calls it per file.
    let rel = match path.strip_prefix(workdir) {
        Ok(rel) => Some(rel.to_path_buf()),
        Err(_) => std::fs::canonicalize(workdir)
            .ok()
            .and_then(|root| path.strip_prefix(root).ok().map(Path::to_path_buf)),
    };
    match rel {
        Some(rel) if rel.as_os_str().is_empty() => ".".to_string(),
        Some(rel) => rel.display().to_string(),
        None => path.display().to_string(),
    }
}

/// Name for a sibling temp file of `path`, for atomic replace. Hidden and
/// marked so a leftover after a crash is recognisable.
pub(crate) fn temp_sibling(path: &Path) -> PathBuf {
    let mut name = OsString::from(".");
    name.push(path.file_name().unwrap_or_default());
    name.push(format!(
        ".flyto-tmp-{}-{:x}",
        std::process::id(),
        rand::random::<u64>()
    ));
    path.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn setup() -> (tempfile::TempDir, tempfile::TempDir, PathBuf) {
        let work = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(work.path()).unwrap();
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::write(root.join("src/a.txt"), "a").unwrap();
        std::fs::write(outside.path().join("secret.txt"), "s").unwrap();
        (work, outside, root)
    }

    #[test]
    fn relative_and_absolute_inside_are_fine() {
        let (_w, _o, root) = setup();
        assert_eq!(resolve(&root, "src/a.txt").unwrap(), root.join("src/a.txt"));
        assert_eq!(
            resolve(&root, "./src/../src/a.txt").unwrap(),
            root.join("src/a.txt")
        );
        let abs = root.join("src/a.txt");
        assert_eq!(resolve(&root, abs.to_str().unwrap()).unwrap(), abs);
        // Not existing yet: allowed, for write.
        assert_eq!(
            resolve(&root, "new/dir/f.txt").unwrap(),
            root.join("new/dir/f.txt")
        );
        assert_eq!(resolve(&root, ".").unwrap(), root);
    }

    #[test]
    fn dotdot_escape_is_refused_with_a_clear_message() {
        let (_w, _o, root) = setup();
        let err = resolve(&root, "../x").unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, GuardError::Outside { .. }), "{msg}");
        assert!(
            msg.contains("path ../x is outside the session workdir"),
            "{msg}"
        );
        assert!(msg.contains(&root.display().to_string()), "{msg}");
        assert!(msg.contains("only work inside it"), "{msg}");
        assert!(resolve(&root, "src/../../x").is_err());
        assert!(resolve(&root, "src/../../../../../../etc/passwd").is_err());
    }

    #[test]
    fn absolute_path_outside_is_refused() {
        let (_w, o, root) = setup();
        let p = o.path().join("secret.txt");
        let err = resolve(&root, p.to_str().unwrap()).unwrap_err();
        assert!(matches!(err, GuardError::Outside { .. }), "{err}");
        assert!(resolve(&root, "/etc/passwd").is_err());
        assert!(resolve(&root, "/").is_err());
    }

    #[test]
    fn file_symlink_pointing_out_is_refused() {
        let (_w, o, root) = setup();
        symlink(o.path().join("secret.txt"), root.join("link.txt")).unwrap();
        let err = resolve(&root, "link.txt").unwrap_err();
        assert!(matches!(err, GuardError::SymlinkOutside { .. }), "{err}");
        assert!(err.to_string().contains("symlink"), "{err}");
        // A dangling link pointing out: writing through it would create the
        // file outside.
        symlink(o.path().join("nope.txt"), root.join("dangling.txt")).unwrap();
        assert!(resolve(&root, "dangling.txt").is_err());
    }

    #[test]
    fn directory_symlink_pointing_out_is_refused_for_new_files_too() {
        let (_w, o, root) = setup();
        symlink(o.path(), root.join("out")).unwrap();
        assert!(resolve(&root, "out/secret.txt").is_err());
        assert!(resolve(&root, "out/new/file.txt").is_err());
        assert!(resolve(&root, "out").is_err());
        // Into the link and back out lexically: the kernel would resolve
        // `out/..` to the outside dir's parent, so this is refused too.
        let name = o.path().file_name().unwrap().to_str().unwrap().to_string();
        assert!(resolve(&root, &format!("out/../{name}/secret.txt")).is_err());
    }

    #[test]
    fn symlinks_that_stay_inside_are_followed() {
        let (_w, _o, root) = setup();
        symlink(root.join("src"), root.join("srclink")).unwrap();
        symlink("a.txt", root.join("src/rel.txt")).unwrap();
        assert_eq!(
            resolve(&root, "srclink/a.txt").unwrap(),
            root.join("src/a.txt")
        );
        assert_eq!(
            resolve(&root, "src/rel.txt").unwrap(),
            root.join("src/a.txt")
        );
        assert_eq!(
            resolve(&root, "srclink/new.txt").unwrap(),
            root.join("src/new.txt")
        );
    }

    #[test]
    fn symlink_loops_are_reported() {
        let (_w, _o, root) = setup();
        symlink("b", root.join("a")).unwrap();
        symlink("a", root.join("b")).unwrap();
        let err = resolve(&root, "a").unwrap_err();
        assert!(matches!(err, GuardError::SymlinkLoop { .. }), "{err}");
    }

    #[test]
    fn empty_and_tilde_paths_are_explained() {
        let (_w, _o, root) = setup();
        assert!(matches!(
            resolve(&root, "  "),
            Err(GuardError::Empty { .. })
        ));
        assert!(matches!(
            resolve(&root, "~/x"),
            Err(GuardError::Tilde { .. })
        ));
    }

    #[test]
    fn workdir_reached_through_a_symlink_is_canonicalised() {
        let (_w, _o, root) = setup();
        let alias_dir = tempfile::tempdir().unwrap();
        let alias = alias_dir.path().join("w");
        symlink(&root, &alias).unwrap();
        assert_eq!(
            resolve(&alias, "src/a.txt").unwrap(),
            root.join("src/a.txt")
        );
        let via_alias = alias.join("src/a.txt");
        assert_eq!(
            resolve(&root, via_alias.to_str().unwrap()).unwrap(),
            root.join("src/a.txt")
        );
    }

    #[test]
    fn display_rel_is_relative_inside() {
        let (_w, _o, root) = setup();
        assert_eq!(display_rel(&root, &root.join("src/a.txt")), "src/a.txt");
        assert_eq!(display_rel(&root, &root), ".");
    }
}
