//! sandbox: the kernel confinement of every process an agent starts. It
//! owns the `[sandbox]` config section, the probe of what the kernel
//! offers, and the work done in the child between fork and exec. It does
//! not decide what runs (that is `policy`) and does not spawn (that is
//! `process`, which calls [`Prepared::apply`] in the child).
//!
//! Two mechanisms, because Landlock grants access per hierarchy and cannot
//! take a folder out of a readable parent:
//! - a private mount namespace (an unprivileged user namespace mapping the
//!   user's own uid) puts an empty tmpfs over each hidden folder (flytod's
//!   state, config and runtime directories, credential folders) and
//!   `/dev/null` over each hidden file; the child's own scoped plan socket
//!   is bound back into the hidden runtime directory;
//! - Landlock (applied last, so the mounts cannot be undone: a Landlocked
//!   process may not mount or unmount) allows reads everywhere and writes
//!   only in the workdir, a private TMPDIR and `[sandbox] writable`; with
//!   `network = false` it also denies TCP connect and bind (ABI 4+), and it
//!   keeps signals and abstract UNIX sockets inside the sandbox (ABI 6+);
//! - the socket gate (`socket_gate`, a seccomp filter applied after
//!   Landlock) lets a UNIX-socket connect reach only the child's plan
//!   socket, its own sockets and `[sandbox] sockets`: Landlock does not
//!   restrict those, and a server the user runs (tmux, screen, D-Bus,
//!   ssh-agent) would otherwise act for the child outside the sandbox.
//!
//! With `network = false` and user namespaces the child also gets a network
//! namespace of its own with only loopback: no packet of any protocol
//! leaves it.
//!
//! Where user namespaces are refused, the read grants are built around the
//! hidden paths instead (their parents' listings become unreadable too).
//! Children inherit both, and neither can be removed from inside.

use std::collections::HashMap;
use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock, RwLock};

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, Ruleset, RulesetAttr,
    RulesetCreatedAttr, Scope, path_beneath_rules,
};
use serde::{Deserialize, Serialize};

pub use crate::kernel::confinement::{Profile, SandboxSpec};

/// The `[sandbox]` section of the daemon's config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxConfig {
    /// The profile of agents' processes unless a session says otherwise.
    pub profile: Profile,
    /// More folders agents may write to (`~` is the home directory).
    pub writable: Vec<String>,
    /// More paths hidden from agents, besides flytod's own directories and
    /// `~/.ssh`, `~/.gnupg`, `~/.aws`, `~/.config/gh`.
    pub hidden: Vec<String>,
    /// Network allowed (false: an empty network namespace, no TCP).
    pub network: bool,
    /// UNIX sockets agents' commands may connect to besides their plan
    /// socket and their own (`"~/.docker/run/docker.sock"`).
    pub sockets: Vec<String>,
    /// Refuse to run agents' commands where the kernel cannot confine them.
    pub require: bool,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            profile: Profile::WorkspaceWrite,
            writable: Vec::new(),
            hidden: Vec::new(),
            network: true,
            sockets: Vec::new(),
            require: false,
        }
    }
}

/// What this kernel offers, probed once at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Support {
    /// 0: no Landlock.
    pub landlock_abi: i32,
    /// Unprivileged user namespaces work (so hidden paths get mounts).
    pub userns: bool,
    /// Why something is missing, in words for the log.
    pub note: Option<String>,
    /// `None`: UNIX-socket connects are gated; else why they are not.
    pub gate: Option<String>,
}

impl Support {
    /// One line for `stats`, the log and a session's first event.
    pub fn describe(&self) -> String {
        let base = self.describe_landlock();
        match (&self.gate, self.landlock_abi) {
            (_, 0) => base,
            (None, _) => format!("{base}, socket gate"),
            (Some(why), _) => format!(
                "{base}; UNIX sockets are not gated ({why}): agents' commands can reach servers the user runs"
            ),
        }
    }

    fn describe_landlock(&self) -> String {
        match (self.landlock_abi, self.userns) {
            (0, _) => format!(
                "unavailable: {}",
                self.note
                    .as_deref()
                    .unwrap_or("this kernel has no Landlock")
            ),
            (abi, true) => format!("landlock ABI {abi}, mount namespace"),
            (abi, false) => format!(
                "landlock ABI {abi}, no mount namespace ({}): hidden paths are left out of the read grants",
                self.note.as_deref().unwrap_or("user namespaces refused")
            ),
        }
    }
}

/// The daemon-wide part: hidden and extra writable paths, `require`.
#[derive(Debug, Clone)]
pub struct Host {
    pub support: Support,
    pub hidden: Vec<PathBuf>,
    pub writable: Vec<PathBuf>,
    /// `[sandbox] sockets`, expanded.
    pub sockets: Vec<PathBuf>,
    pub require: bool,
    /// See [`tmp_root`].
    pub tmp_root: PathBuf,
}

static HOST: RwLock<Option<Arc<Host>>> = RwLock::new(None);
static SUPPORT: OnceLock<Support> = OnceLock::new();

/// Sets the daemon-wide part (at start and on a config reload).
pub fn configure(host: Host) {
    if let Ok(mut h) = HOST.write() {
        *h = Some(Arc::new(host));
    }
}

/// What a session's first event says when its commands cannot be
/// confined; `None` when they can (or no sandbox is configured).
pub fn degraded() -> Option<String> {
    let host = host()?;
    (host.support.landlock_abi == 0).then(|| {
        if host.require {
            format!(
                "sandbox {}: commands are refused ([sandbox] require = true)",
                host.support.describe()
            )
        } else {
            format!(
                "sandbox {}: commands run unconfined (set [sandbox] require = true to refuse them)",
                host.support.describe()
            )
        }
    })
}

fn host() -> Option<Arc<Host>> {
    HOST.read().ok().and_then(|h| h.clone())
}

/// The private TMPDIR of `owner` (a session or plan id): under the system
/// temporary directory, since flytod's state directory is hidden.
pub fn tmpdir_for(owner: &str) -> PathBuf {
    match host() {
        Some(h) => h.tmp_root.join(owner),
        None => tmp_root(Path::new("")).join(owner),
    }
}

/// Where the private TMPDIRs of the flytod with `state_dir` live: one
/// folder per user and state directory, so two daemons of one user (each
/// with its own `s1`) never share one.
pub fn tmp_root(state_dir: &Path) -> PathBuf {
    use sha2::{Digest, Sha256};
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    let digest = Sha256::digest(state_dir.as_os_str().as_bytes());
    let tag: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
    std::env::temp_dir().join(format!("flyto-{uid}-{tag}"))
}

/// The folders hidden whatever the config says, under `home`.
pub fn default_hidden(home: &Path) -> Vec<PathBuf> {
    [".ssh", ".gnupg", ".aws", ".config/gh"]
        .iter()
        .map(|p| home.join(p))
        .collect()
}

/// Folders where servers the user runs keep their sockets: tmux, screen,
/// and the per-user runtime directory (D-Bus, `systemd --user`, gpg-agent,
/// ssh-agent, Wayland). The socket gate already refuses connects there;
/// hidden too, a child that races the gate's check finds nothing.
pub fn server_dirs() -> Vec<PathBuf> {
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    let mut dirs = vec![
        PathBuf::from(format!("/tmp/tmux-{uid}")),
        PathBuf::from(format!("/run/user/{uid}")),
        PathBuf::from("/run/screen"),
    ];
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    dirs.extend(var("TMUX_TMPDIR").map(|d| PathBuf::from(d).join(format!("tmux-{uid}"))));
    dirs.extend(var("SCREENDIR").map(PathBuf::from));
    dirs.extend(var("XDG_RUNTIME_DIR").map(PathBuf::from));
    dirs
}

/// `~/x` and `~` expanded against `home`.
pub fn expand(path: &str, home: Option<&Path>) -> PathBuf {
    match (path.strip_prefix("~"), home) {
        (Some(rest), Some(home)) if rest.is_empty() || rest.starts_with('/') => {
            home.join(rest.trim_start_matches('/'))
        }
        _ => PathBuf::from(path),
    }
}

/// Set to `unavailable` in flytod's environment, the probe reports no
/// Landlock; set to `no-userns`, no user namespaces (to try the degraded
/// modes and `require` without such a kernel).
pub const PROBE_ENV: &str = "FLYTO_SANDBOX_PROBE";

/// What the kernel offers (probed once; later calls return the same).
pub fn probe() -> Support {
    SUPPORT.get_or_init(probe_now).clone()
}

fn probe_now() -> Support {
    if std::env::var(PROBE_ENV).as_deref() == Ok("unavailable") {
        return Support {
            landlock_abi: 0,
            userns: false,
            note: Some(format!(
                "the probe was told to fail ({PROBE_ENV}=unavailable)"
            )),
            gate: Some("no Landlock".into()),
        };
    }
    let simulate_no_userns = std::env::var(PROBE_ENV).as_deref() == Ok("no-userns");
    // SAFETY: landlock_create_ruleset(NULL, 0, VERSION) only returns a number.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            1u32, // LANDLOCK_CREATE_RULESET_VERSION
        )
    };
    let (landlock_abi, mut note) = if abi > 0 {
        (abi as i32, None)
    } else {
        let e = std::io::Error::last_os_error();
        let why = match e.raw_os_error() {
            Some(libc::ENOSYS) => "this kernel is built without Landlock".to_string(),
            Some(libc::EOPNOTSUPP) => {
                "Landlock is not enabled at boot (add landlock to the lsm= kernel parameter)"
                    .to_string()
            }
            _ => format!("Landlock probe failed: {e}"),
        };
        (0, Some(why))
    };
    let userns = match userns_works().and_then(|()| {
        if simulate_no_userns {
            Err(std::io::Error::other(format!(
                "the probe was told they are refused ({PROBE_ENV}=no-userns)"
            )))
        } else {
            Ok(())
        }
    }) {
        Ok(()) => true,
        Err(e) => {
            if note.is_none() {
                note = Some(format!("user namespaces refused: {e}"));
            }
            false
        }
    };
    Support {
        landlock_abi,
        userns,
        note,
        gate: super::socket_gate::probe().err(),
    }
}

/// Starts `/bin/true` in a user and mount namespace of its own.
fn userns_works() -> std::io::Result<()> {
    let maps = IdMaps::current()?;
    let mut cmd = std::process::Command::new("/bin/true");
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: the closure makes only raw syscalls on buffers built before
    // the fork.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(move || maps.enter(false));
    }
    let status = cmd.status()?;
    if status.success() {
        Ok(())
    } else {
        Err(std::io::Error::other(
            "a process in a new user namespace failed to start",
        ))
    }
}

/// The identity mappings written from inside a new user namespace.
#[derive(Debug)]
struct IdMaps {
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
}

impl IdMaps {
    fn current() -> std::io::Result<IdMaps> {
        // SAFETY: getuid/getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        Ok(IdMaps {
            uid_map: format!("{uid} {uid} 1").into_bytes(),
            gid_map: format!("{gid} {gid} 1").into_bytes(),
        })
    }

    /// In the child: a new user and mount namespace (and network
    /// namespace, with `own_network`), the caller's own ids mapped, mounts
    /// private. Only raw syscalls (async-signal-safe).
    fn enter(&self, own_network: bool) -> std::io::Result<()> {
        let mut flags = libc::CLONE_NEWUSER | libc::CLONE_NEWNS;
        if own_network {
            flags |= libc::CLONE_NEWNET;
        }
        // SAFETY: unshare takes flags only.
        if unsafe { libc::unshare(flags) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        write_file(c"/proc/self/setgroups", b"deny")?;
        write_file(c"/proc/self/uid_map", &self.uid_map)?;
        write_file(c"/proc/self/gid_map", &self.gid_map)?;
        // SAFETY: a static path and null type/data: make every mount
        // private, so nothing done here reaches the daemon's namespace.
        let r = unsafe {
            libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            )
        };
        if r != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if own_network {
            loopback_up()?;
        }
        Ok(())
    }
}

/// Brings `lo` up in a new network namespace (it starts down), so servers
/// and clients inside the sandbox still reach each other.
fn loopback_up() -> std::io::Result<()> {
    // SAFETY: socket/ioctl/close on a zeroed ifreq naming "lo".
    unsafe {
        let sock = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if sock < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut ifr: libc::ifreq = std::mem::zeroed();
        ifr.ifr_name[0] = b'l' as libc::c_char;
        ifr.ifr_name[1] = b'o' as libc::c_char;
        let mut r = libc::ioctl(sock, libc::SIOCGIFFLAGS, &mut ifr);
        if r == 0 {
            ifr.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            r = libc::ioctl(sock, libc::SIOCSIFFLAGS, &ifr);
        }
        let err = std::io::Error::last_os_error();
        libc::close(sock);
        if r != 0 {
            return Err(err);
        }
    }
    Ok(())
}

fn write_file(path: &std::ffi::CStr, data: &[u8]) -> std::io::Result<()> {
    // SAFETY: open/write/close on a NUL-terminated path and a live buffer.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let n = libc::write(fd, data.as_ptr().cast(), data.len());
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        if n != data.len() as isize {
            return Err(err);
        }
    }
    Ok(())
}

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error(
        "not run: the sandbox is required (`[sandbox] require = true`) but this kernel cannot confine commands ({0}); run flytod on a kernel with Landlock, or set `require = false`"
    )]
    Required(String),
    #[error("cannot set up the sandbox: {0}")]
    Setup(String),
}

/// A mount done in the child before Landlock.
#[derive(Debug)]
enum Mount {
    /// An empty tmpfs over a hidden folder.
    Tmpfs(CString),
    /// `/dev/null` over a hidden file.
    DevNull(CString),
    /// A path to keep inside a hidden folder: opened (in the new
    /// namespace, so it can be bound there) before the hiding mounts, then
    /// bound over an empty file created at the same place in the tmpfs.
    Keep(CString),
}

/// Everything the child needs, built before the fork.
#[derive(Debug)]
pub struct Prepared {
    ruleset: Option<Arc<OwnedFd>>,
    namespace: Option<Namespace>,
    gate: Option<super::socket_gate::Ticket>,
}

/// The namespaces and mounts of one child.
#[derive(Debug)]
struct Namespace {
    maps: IdMaps,
    mounts: Vec<Mount>,
    /// A network namespace with only loopback (`network = false`).
    own_network: bool,
}

/// Prepares the confinement of one command; `None` when it runs
/// unconfined (profile `off`, or no Landlock and `require` unset).
/// `keep`: a path inside a hidden folder that stays reachable (the
/// command's own scoped plan socket).
pub fn prepare(spec: &SandboxSpec, keep: Option<&Path>) -> Result<Option<Prepared>, SandboxError> {
    if spec.is_off() {
        return Ok(None);
    }
    let Some(host) = host() else {
        // Not configured (unit tests of other rooms): nothing to apply.
        return Ok(None);
    };
    let support = &host.support;
    if support.landlock_abi == 0 {
        if host.require {
            return Err(SandboxError::Required(support.describe()));
        }
        return Ok(None);
    }
    if let Some(tmp) = &spec.tmpdir {
        ensure_private_dir(tmp)?;
    }
    let writable: Vec<PathBuf> = match spec.profile {
        Profile::WorkspaceWrite => spec
            .write_roots
            .iter()
            .chain(spec.tmpdir.iter())
            .chain(host.writable.iter())
            .cloned()
            .collect(),
        Profile::ReadOnly | Profile::Off => spec.tmpdir.iter().cloned().collect(),
    };
    // A hidden path that holds the work (a workdir inside the config's
    // folder, say) cannot be hidden without hiding the work.
    let hidden: Vec<&PathBuf> = host
        .hidden
        .iter()
        .filter(|h| {
            !spec
                .write_roots
                .iter()
                .chain(writable.iter())
                .any(|w| w.starts_with(h))
        })
        .filter(|h| h.symlink_metadata().is_ok())
        .collect();
    let hidden = outermost(hidden);
    let keep: Vec<&Path> = keep
        .into_iter()
        .chain(host.sockets.iter().map(PathBuf::as_path))
        .collect();
    let namespace = if support.userns {
        Some(Namespace {
            maps: IdMaps::current().map_err(setup)?,
            mounts: mounts(&hidden, &keep)?,
            own_network: !spec.network,
        })
    } else {
        None
    };
    let gate = match &support.gate {
        Some(_) => None,
        None => {
            let rules = super::socket_gate::Rules {
                sockets: keep.iter().map(|p| p.to_path_buf()).collect(),
                roots: writable.clone(),
                abstract_scoped: support.landlock_abi >= 6,
            };
            Some(super::socket_gate::ticket(&rules.canonical()).map_err(setup)?)
        }
    };
    let ruleset = cached_ruleset(
        support.landlock_abi,
        spec,
        &writable,
        &hidden,
        namespace.is_some(),
    )?;
    Ok(Some(Prepared {
        ruleset,
        namespace,
        gate,
    }))
}

/// The paths of `hidden` that are not inside another one: hiding a folder
/// hides what is in it, and a mount under a folder already replaced by an
/// empty tmpfs has nothing to mount on (the config file in its own config
/// folder made every confined command fail to start).
fn outermost(hidden: Vec<&PathBuf>) -> Vec<&PathBuf> {
    hidden
        .iter()
        .filter(|h| !hidden.iter().any(|o| o != *h && h.starts_with(o)))
        .copied()
        .collect()
}

/// How long a built ruleset is reused for the same confinement: building
/// one opens every granted path (hundreds around hidden paths without a
/// mount namespace). A ruleset is copied into each child's domain when it
/// restricts itself, so one fd serves many children; a path created
/// meanwhile is granted after this.
const RULESET_FOR: std::time::Duration = std::time::Duration::from_secs(10);
/// Confinements kept at once (sessions with different workdirs).
const RULESETS_KEPT: usize = 32;

type RulesetCache = HashMap<String, (std::time::Instant, Option<Arc<OwnedFd>>)>;
static RULESETS: std::sync::Mutex<Option<RulesetCache>> = std::sync::Mutex::new(None);

fn cached_ruleset(
    kernel_abi: i32,
    spec: &SandboxSpec,
    writable: &[PathBuf],
    hidden: &[&PathBuf],
    mounted: bool,
) -> Result<Option<Arc<OwnedFd>>, SandboxError> {
    // Rules hold the inodes they were built from: a workdir removed and
    // made again is another folder, so its inode is part of the key.
    use std::os::unix::fs::MetadataExt;
    let inodes: Vec<(u64, u64)> = writable
        .iter()
        .map(|w| std::fs::metadata(w).map_or((0, 0), |m| (m.dev(), m.ino())))
        .collect();
    let key = format!(
        "{kernel_abi}|{}|{writable:?}|{inodes:?}|{hidden:?}|{mounted}",
        spec.network
    );
    if let Ok(mut cache) = RULESETS.lock()
        && let Some((at, fd)) = cache.get_or_insert_with(HashMap::new).get(&key)
        && at.elapsed() < RULESET_FOR
    {
        return Ok(fd.clone());
    }
    let fd = ruleset(kernel_abi, spec, writable, hidden, mounted)?.map(Arc::new);
    if let Ok(mut cache) = RULESETS.lock() {
        let cache = cache.get_or_insert_with(HashMap::new);
        if cache.len() >= RULESETS_KEPT {
            cache.clear();
        }
        cache.insert(key, (std::time::Instant::now(), fd.clone()));
    }
    Ok(fd)
}

fn setup(e: impl std::fmt::Display) -> SandboxError {
    SandboxError::Setup(e.to_string())
}

fn ensure_private_dir(dir: &Path) -> Result<(), SandboxError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| setup(format!("cannot create TMPDIR {}: {e}", dir.display())))
}

fn cstring(path: &Path) -> Result<CString, SandboxError> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| setup(format!("path with a NUL byte: {}", path.display())))
}

fn mounts(hidden: &[&PathBuf], keep: &[&Path]) -> Result<Vec<Mount>, SandboxError> {
    let mut out = Vec::new();
    for h in hidden {
        let is_dir = h.metadata().map(|m| m.is_dir()).unwrap_or(false);
        out.push(if is_dir {
            Mount::Tmpfs(cstring(h)?)
        } else {
            Mount::DevNull(cstring(h)?)
        });
    }
    for keep in keep {
        if hidden.iter().any(|h| keep.starts_with(h)) && keep.exists() {
            out.push(Mount::Keep(cstring(keep)?));
        }
    }
    Ok(out)
}

/// Devices every program expects to open for writing.
const DEVICES: &[&str] = &["/dev/null", "/dev/zero", "/dev/full", "/dev/tty"];

fn ruleset(
    kernel_abi: i32,
    spec: &SandboxSpec,
    writable: &[PathBuf],
    hidden: &[&PathBuf],
    mounted: bool,
) -> Result<Option<OwnedFd>, SandboxError> {
    // ABI 9 would also confine connecting to unix sockets, which the plan
    // socket needs; the rights used here are those of ABI 8 and below.
    let abi = ABI::from(kernel_abi.min(8));
    let all = AccessFs::from_all(abi);
    let read = AccessFs::from_read(abi);
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)
        .map_err(setup)?;
    if !spec.network && kernel_abi >= 4 {
        ruleset = ruleset
            .handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)
            .map_err(setup)?;
    }
    if kernel_abi >= 6 {
        ruleset = ruleset
            .scope(Scope::Signal | Scope::AbstractUnixSocket)
            .map_err(setup)?;
    }
    let read_roots = if mounted {
        vec![PathBuf::from("/")]
    } else {
        read_roots(Path::new("/"), hidden)
    };
    let devices = AccessFs::from_file(abi) & !AccessFs::Execute;
    let created = ruleset
        .create()
        .map_err(setup)?
        .add_rules(path_beneath_rules(&read_roots, read))
        .map_err(setup)?
        .add_rules(path_beneath_rules(writable, all))
        .map_err(setup)?
        .add_rules(path_beneath_rules(DEVICES, devices))
        .map_err(setup)?;
    Ok(created.into())
}

/// Readable hierarchies under `dir` that leave out every hidden path:
/// `dir` itself when nothing hidden is below it, else its entries, one by
/// one (a symlink counts as what it points to).
fn read_roots(dir: &Path, hidden: &[&PathBuf]) -> Vec<PathBuf> {
    let real = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    if hidden
        .iter()
        .any(|h| real.starts_with(h) || dir.starts_with(h))
    {
        return Vec::new();
    }
    if !hidden.iter().any(|h| h.starts_with(&real)) {
        return vec![dir.to_path_buf()];
    }
    let Ok(entries) = std::fs::read_dir(&real) else {
        return Vec::new();
    };
    entries
        .flatten()
        .flat_map(|e| read_roots(&e.path(), hidden))
        .collect()
}

impl Prepared {
    /// In the child, between fork and exec: namespace and mounts, then
    /// Landlock. Only raw syscalls on what [`prepare`] built.
    pub fn apply(&self) -> std::io::Result<()> {
        if let Some(Namespace {
            maps,
            mounts,
            own_network,
        }) = &self.namespace
        {
            maps.enter(*own_network)?;
            let mut kept = Vec::new();
            for m in mounts {
                if let Mount::Keep(path) = m {
                    // SAFETY: a NUL-terminated path; O_PATH needs no mode.
                    let fd = unsafe { libc::open(path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
                    if fd < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    kept.push((fd, path));
                }
            }
            for m in mounts {
                mount_one(m)?;
            }
            for (fd, path) in kept {
                bind_fd(fd, path)?;
            }
        }
        // SAFETY: prctl and the Landlock syscall take integers only.
        unsafe {
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if let Some(fd) = &self.ruleset {
                let fd: RawFd = fd.as_raw_fd();
                if libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
        }
        // After no-new-privs, which seccomp needs.
        if let Some(gate) = &self.gate {
            gate.install()?;
        }
        Ok(())
    }
}

fn mount_one(m: &Mount) -> std::io::Result<()> {
    // SAFETY: NUL-terminated strings built before the fork; open/close on
    // them; mount with static or prebuilt arguments.
    let r = unsafe {
        match m {
            Mount::Tmpfs(target) => libc::mount(
                c"tmpfs".as_ptr(),
                target.as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                c"size=64k,mode=0755".as_ptr().cast(),
            ),
            // nodev: opening it fails (EACCES) rather than reading as
            // empty or swallowing a write as /dev/null would.
            Mount::DevNull(target) => {
                let r = libc::mount(
                    c"/dev/null".as_ptr(),
                    target.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND,
                    std::ptr::null(),
                );
                if r != 0 {
                    r
                } else {
                    libc::mount(
                        std::ptr::null(),
                        target.as_ptr(),
                        std::ptr::null(),
                        libc::MS_BIND
                            | libc::MS_REMOUNT
                            | libc::MS_RDONLY
                            | libc::MS_NODEV
                            | libc::MS_NOSUID
                            | libc::MS_NOEXEC,
                        std::ptr::null(),
                    )
                }
            }
            Mount::Keep(_) => 0,
        }
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Binds what `fd` (an O_PATH fd) names over a new empty file at `target`.
/// No allocation: the `/proc/self/fd/N` path is built on the stack.
fn bind_fd(fd: libc::c_int, target: &CString) -> std::io::Result<()> {
    let mut source = [0u8; 32];
    let prefix = b"/proc/self/fd/";
    source[..prefix.len()].copy_from_slice(prefix);
    let mut digits = [0u8; 10];
    let mut n = fd as u32;
    let mut len = 0;
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for i in 0..len {
        source[prefix.len() + i] = digits[len - 1 - i];
    }
    // SAFETY: `source` is NUL-terminated (zeroed past the digits), `target`
    // is a CString; open/close/mount take them and integers.
    unsafe {
        let placeholder = libc::open(
            target.as_ptr(),
            libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
            0o600,
        );
        if placeholder < 0 {
            return Err(std::io::Error::last_os_error());
        }
        libc::close(placeholder);
        if libc::mount(
            source.as_ptr().cast(),
            target.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        ) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_parse_and_only_tighten() {
        assert_eq!(Profile::parse("read-only"), Ok(Profile::ReadOnly));
        assert!(
            Profile::parse("strict")
                .unwrap_err()
                .contains("workspace-write")
        );
        assert_eq!(
            Profile::Off.stricter(Profile::WorkspaceWrite),
            Profile::WorkspaceWrite
        );
        assert_eq!(Profile::ReadOnly.stricter(Profile::Off), Profile::ReadOnly);
    }

    #[test]
    fn read_roots_leave_out_hidden_paths() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("home/.ssh")).unwrap();
        std::fs::create_dir_all(root.join("home/src")).unwrap();
        std::fs::create_dir_all(root.join("etc")).unwrap();
        std::fs::write(root.join("home/notes"), "x").unwrap();
        let hidden = root.join("home/.ssh");
        let mut roots = read_roots(&root, &[&hidden]);
        roots.sort();
        assert_eq!(
            roots,
            vec![
                root.join("etc"),
                root.join("home/notes"),
                root.join("home/src")
            ]
        );
    }

    #[test]
    fn a_hidden_path_inside_another_is_not_mounted_twice() {
        let (dir, file, other) = (
            PathBuf::from("/home/u/.config/flyto"),
            PathBuf::from("/home/u/.config/flyto/config.toml"),
            PathBuf::from("/home/u/.ssh"),
        );
        let kept = outermost(vec![&file, &dir, &other]);
        assert_eq!(kept, vec![&dir, &other]);
    }

    #[test]
    fn home_is_expanded() {
        let home = Path::new("/home/u");
        assert_eq!(
            expand("~/.kube", Some(home)),
            PathBuf::from("/home/u/.kube")
        );
        assert_eq!(expand("~", Some(home)), PathBuf::from("/home/u"));
        assert_eq!(expand("/srv", Some(home)), PathBuf::from("/srv"));
    }
}
