//! `systemd-analyze verify` over the unit files in `systemd/` (system units)
//! and `systemd/user/` (user units).
//!
//! `systemd-analyze verify` exits 0 even for unknown directives and
//! unparsable values (it logs them and carries on), so the exit code alone
//! proves nothing: the output is read, and every line about one of our unit
//! files is a complaint unless it is known noise from the environment (no
//! running systemd, missing dependency units, no D-Bus). The
//! `*_checker_is_live` tests feed in a broken copy and insist that the
//! complaints show up, so a checker that silently stopped working fails too.
//!
//! Verify also checks that every `Exec*=` binary exists. flytod is not
//! installed where the tests run, so the staged copies get
//! `ExecStart=/bin/true`; everything else is verified as written.
//!
//! When `systemd-analyze` is not on `PATH` the tests say so and pass; CI
//! (`.ci/run`) installs it, so there they always run.

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail, ensure};

const UNIT_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../systemd");

/// Unit files, relative to [`UNIT_DIR`], per manager.
const SYSTEM_UNITS: &[&str] = &["flytod.service", "flytod.socket"];
const USER_UNITS: &[&str] = &["user/flytod.service", "user/flytod.socket"];

/// Binaries the units use that come from the host OS rather than from us. If
/// one is missing on the test host (e.g. `/bin/kill` needs procps, which a
/// minimal container lacks), it is swapped for `/bin/true` with a note
/// instead of failing; CI installs them, so there they are checked as is.
const HOST_BINARIES: &[&str] = &["/bin/kill"];

/// Lines that mention our units but are about the environment, not our files.
const ENVIRONMENT_NOISE: &[&str] = &[
    "Cannot add dependency job",
    "Failed to connect to bus",
    "Failed to get D-Bus connection",
    "System has not been booted with systemd",
];

#[derive(Clone, Copy, Debug)]
enum Manager {
    System,
    User,
}

/// What one `systemd-analyze verify` run said.
struct Verdict {
    success: bool,
    output: String,
    complaints: Vec<String>,
}

/// `systemd-analyze` on `PATH`, if any.
fn systemd_analyze() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("systemd-analyze"))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn true_binary() -> Result<&'static str> {
    ["/bin/true", "/usr/bin/true"]
        .into_iter()
        .find(|p| is_executable(Path::new(p)))
        .context("neither /bin/true nor /usr/bin/true exists")
}

fn read_unit(rel: &str) -> Result<(String, String)> {
    let path = Path::new(UNIT_DIR).join(rel);
    let text = fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let name = path
        .file_name()
        .and_then(OsStr::to_str)
        .with_context(|| format!("no file name in {}", path.display()))?
        .to_owned();
    Ok((name, text))
}

/// Rewrites a unit for verification on this host: `ExecStart=` runs
/// `/bin/true`, and missing [`HOST_BINARIES`] are replaced the same way.
fn stage_text(name: &str, text: &str) -> Result<String> {
    let true_bin = true_binary()?;
    let mut out = String::with_capacity(text.len());
    let mut exec_starts = 0;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix("ExecStart=") {
            ensure!(
                !rest.trim_end().ends_with('\\'),
                "{name}: ExecStart= continues on the next line; the test cannot rewrite it"
            );
            exec_starts += 1;
            out.push_str("ExecStart=");
            out.push_str(true_bin);
        } else if trimmed.starts_with("Exec") && trimmed.contains('=') {
            let mut rewritten = line.to_owned();
            for bin in HOST_BINARIES {
                if line.contains(bin) && !is_executable(Path::new(bin)) {
                    eprintln!(
                        "systemd test: {bin} is missing on this host; verifying {name} with {true_bin} in its place"
                    );
                    rewritten = rewritten.replace(bin, true_bin);
                }
            }
            out.push_str(&rewritten);
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    if name.ends_with(".service") {
        ensure!(
            exec_starts == 1,
            "{name}: expected one ExecStart= line, found {exec_starts}"
        );
    }
    Ok(out)
}

/// Lines of verify output that are complaints about one of `names`.
fn complaints(output: &str, names: &[String]) -> Vec<String> {
    output
        .lines()
        .map(str::trim)
        .filter(|line| names.iter().any(|name| line.contains(name.as_str())))
        .filter(|line| !ENVIRONMENT_NOISE.iter().any(|noise| line.contains(noise)))
        .map(str::to_owned)
        .collect()
}

/// Writes `units` (file name, contents) into a fresh directory and runs
/// `systemd-analyze [--user] verify` on them.
fn verify(analyze: &Path, manager: Manager, units: &[(String, String)]) -> Result<Verdict> {
    let dir = tempfile::tempdir()?;
    let mut paths = Vec::new();
    for (name, text) in units {
        let path = dir.path().join(name);
        fs::write(&path, stage_text(name, text)?)
            .with_context(|| format!("writing {}", path.display()))?;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644))?;
        paths.push(path);
    }

    let mut cmd = Command::new(analyze);
    cmd.current_dir(dir.path())
        // Warnings and errors only; plain, unadorned lines.
        .env("SYSTEMD_LOG_LEVEL", "notice")
        .env("SYSTEMD_LOG_TARGET", "console")
        .env("SYSTEMD_LOG_COLOR", "0")
        .env("SYSTEMD_LOG_TIME", "0")
        .env("SYSTEMD_LOG_LOCATION", "0")
        .env("SYSTEMD_COLORS", "0")
        .env("SYSTEMD_PAGER", "cat")
        .env_remove("SYSTEMD_UNIT_PATH");
    if let Manager::User = manager {
        // A user manager needs $XDG_RUNTIME_DIR, which root in a container
        // lacks; give it a private one.
        let runtime = dir.path().join("runtime");
        fs::create_dir(&runtime)?;
        fs::set_permissions(&runtime, fs::Permissions::from_mode(0o700))?;
        cmd.arg("--user").env("XDG_RUNTIME_DIR", &runtime);
    }
    cmd.args(["verify", "--man=no"]).args(&paths);

    let out = cmd
        .output()
        .with_context(|| format!("running {}", analyze.display()))?;
    let output = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let names: Vec<String> = units.iter().map(|(name, _)| name.clone()).collect();
    Ok(Verdict {
        success: out.status.success(),
        complaints: complaints(&output, &names),
        output,
    })
}

fn check_clean(manager: Manager, rels: &[&str]) -> Result<()> {
    let Some(analyze) = systemd_analyze() else {
        eprintln!("systemd test skipped: systemd-analyze is not on PATH (apt-get install systemd)");
        return Ok(());
    };
    let units = rels
        .iter()
        .map(|rel| read_unit(rel))
        .collect::<Result<Vec<_>>>()?;
    let verdict = verify(&analyze, manager, &units)?;
    eprintln!(
        "systemd-analyze verify ({manager:?}) of {rels:?}: success={}, output:\n{}",
        verdict.success, verdict.output
    );
    if !verdict.complaints.is_empty() {
        bail!(
            "systemd-analyze verify ({manager:?}) complains about {rels:?}:\n  {}\nfull output:\n{}",
            verdict.complaints.join("\n  "),
            verdict.output
        );
    }
    if !verdict.success {
        // Nothing said about our files: the environment is at fault (e.g. a
        // broken dependency unit on the host). The *_checker_is_live tests
        // catch a verify that does not work at all.
        eprintln!("note: systemd-analyze verify failed, but not because of our units");
    }
    Ok(())
}

/// A copy of `rels` with an unknown directive and an unparsable value in
/// every unit must draw complaints about both, naming our files.
fn check_live(manager: Manager, rels: &[&str]) -> Result<()> {
    let Some(analyze) = systemd_analyze() else {
        eprintln!("systemd test skipped: systemd-analyze is not on PATH (apt-get install systemd)");
        return Ok(());
    };
    let mut units = Vec::new();
    for rel in rels {
        let (name, text) = read_unit(rel)?;
        let section = if name.ends_with(".socket") {
            "[Socket]"
        } else {
            "[Service]"
        };
        let (value_key, bad_value) = if name.ends_with(".socket") {
            ("Backlog", "lots")
        } else {
            ("WatchdogSec", "forever")
        };
        ensure!(text.contains(section), "{rel} has no {section} section");
        let broken = text.replacen(
            section,
            &format!("{section}\nBogusDirective=1\n{value_key}={bad_value}"),
            1,
        );
        units.push((name, broken, bad_value));
    }
    let staged: Vec<(String, String)> = units
        .iter()
        .map(|(name, text, _)| (name.clone(), text.clone()))
        .collect();
    let verdict = verify(&analyze, manager, &staged)?;
    for (name, _, bad_value) in &units {
        let about = |needle: &str| {
            verdict
                .complaints
                .iter()
                .any(|line| line.contains(name.as_str()) && line.contains(needle))
        };
        ensure!(
            about("BogusDirective"),
            "systemd-analyze verify ({manager:?}) did not report BogusDirective=1 in {name}; output:\n{}",
            verdict.output
        );
        ensure!(
            about(bad_value),
            "systemd-analyze verify ({manager:?}) did not report the bad value {bad_value:?} in {name}; output:\n{}",
            verdict.output
        );
    }
    Ok(())
}

#[test]
fn system_units_verify_clean() -> Result<()> {
    check_clean(Manager::System, SYSTEM_UNITS)
}

#[test]
fn user_units_verify_clean() -> Result<()> {
    check_clean(Manager::User, USER_UNITS)
}

#[test]
fn system_unit_checker_is_live() -> Result<()> {
    check_live(Manager::System, SYSTEM_UNITS)
}

#[test]
fn user_unit_checker_is_live() -> Result<()> {
    check_live(Manager::User, USER_UNITS)
}

#[test]
fn complaint_filter_keeps_our_lines_and_drops_noise() {
    let names = ["flytod.service".to_owned(), "flytod.socket".to_owned()];
    let output = "\
/tmp/x/flytod.service:12: Unknown key 'Bogus' in section [Service], ignoring.
flytod.service: Cannot add dependency job for unit network-online.target, ignoring: Unit not found.
tmp-x-flytod.sock.mount: Failed to load configuration: No such file or directory
Failed to connect to bus: No such file or directory
flytod.socket: Command /nope is not executable: No such file or directory
";
    assert_eq!(
        complaints(output, &names),
        [
            "/tmp/x/flytod.service:12: Unknown key 'Bogus' in section [Service], ignoring.",
            "flytod.socket: Command /nope is not executable: No such file or directory",
        ]
    );
}

/// Options that install a seccomp filter: in a user manager (and in a
/// system one with `User=`) each implies `NoNewPrivileges=yes`.
const SECCOMP_OPTIONS: &[&str] = &[
    "NoNewPrivileges",
    "RestrictAddressFamilies",
    "SystemCallArchitectures",
    "SystemCallFilter",
    "LockPersonality",
    "RestrictRealtime",
    "RestrictSUIDSGID",
    "RestrictNamespaces",
    "MemoryDenyWriteExecute",
    "ProtectKernelModules",
    "ProtectClock",
];

/// `Key=value` lines of a unit, comments left out.
fn settings(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#') && !l.starts_with(';'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// The hardening must not break what steps are documented to use: `ip`
/// and `ss` need netlink sockets, and the user instance runs the user's
/// own tools, `sudo` included, which no-new-privileges breaks.
#[test]
fn the_units_leave_ip_working_and_sudo_in_the_user_instance() -> Result<()> {
    for rel in ["flytod.service", "user/flytod.service"] {
        let (_, text) = read_unit(rel)?;
        for (key, value) in settings(&text) {
            if key == "RestrictAddressFamilies" && !value.is_empty() && !value.starts_with('~') {
                ensure!(
                    value.split_whitespace().any(|f| f == "AF_NETLINK"),
                    "{rel}: RestrictAddressFamilies={value} breaks `ip` and `ss`: add AF_NETLINK"
                );
            }
        }
    }
    let (_, user) = read_unit("user/flytod.service")?;
    let implying: Vec<String> = settings(&user)
        .into_iter()
        .filter(|(k, v)| SECCOMP_OPTIONS.contains(&k.as_str()) && v != "no" && !v.is_empty())
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    ensure!(
        implying.is_empty(),
        "user/flytod.service: {implying:?} imply NoNewPrivileges=yes in a user manager, which breaks `sudo` in the user's steps"
    );
    Ok(())
}
