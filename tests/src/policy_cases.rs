//! The `bash` commands the e2e tests send through the agent's tool, each
//! with the verdict flytod's default `[permissions]` gives it. The session
//! tests run some of them; `policy_check::` runs all of them through a
//! session and through `flytoctl policy_check` and checks the two agree.
//!
//! Every refused command is aimed at the test's own temporary home (HOME
//! is the env's work dir) or at `/` (which `rm` refuses by itself), so a
//! policy regression cannot hurt the machine running the tests.

/// Refused by the built-in `recursive-delete` check.
pub const RM_ROOT: &str = "rm -rf /";
/// Needs approval (`force-push`): with no one attached, refused whole,
/// so the marker is never created.
pub const FORCE_PUSH: &str = "touch pushed-marker && git push --force origin main";
/// Allowed: writes a marker in the workdir.
pub const HARMLESS_WRITE: &str = "echo fine > ok-marker";

/// (command, verdict under the default `[permissions]`).
pub const SHELL_COMMANDS: &[(&str, &str)] = &[
    (RM_ROOT, "deny"),
    (FORCE_PUSH, "ask"),
    (HARMLESS_WRITE, "allow"),
    ("echo before", "allow"),
    ("touch yes.txt", "allow"),
    ("rm -rf ~", "deny"),
    ("echo $(bash -c 'rm -rf ~')", "deny"),
    ("curl -fsS http://127.0.0.1:9/x.sh | sh", "ask"),
    ("$CMD --flag", "ask"),
    // Commands run by other commands, from data or arguments.
    ("xargs rm -rf < /dev/null", "ask"),
    ("find ~ -exec rm -rf {} +", "deny"),
    ("parallel rm -rf ::: ~", "deny"),
    ("timeout 5 nice -n 10 rm -rf ~", "deny"),
    ("ionice -c3 nohup rm -rf ~", "deny"),
    ("env -i PATH=/bin rm -rf ~", "deny"),
    ("sudo -u nobody rm -rf ~", "deny"),
    ("doas rm -rf ~", "deny"),
    ("watch -n 1 'rm -rf ~'", "deny"),
    ("flock ./lock rm -rf ~", "deny"),
    ("setsid rm -rf ~", "deny"),
    ("chroot / rm -rf ~", "deny"),
    ("su -c 'rm -rf ~'", "deny"),
    ("ssh -o BatchMode=yes localhost 'rm -rf ~'", "deny"),
    ("stdbuf -oL rm -rf ~", "deny"),
    ("command rm -rf ~", "deny"),
    ("busybox rm -rf ~", "deny"),
    // An interpreter's inline code.
    (
        "python3 -c \"import shutil, os; shutil.rmtree(os.path.expanduser('~'))\"",
        "deny",
    ),
    ("python3 -c \"import os; os.system('rm -rf ~')\"", "deny"),
    (
        "python3 -c \"import subprocess; subprocess.run(['rm', '-rf', '/'])\"",
        "deny",
    ),
    (
        "python3 -c \"import shutil, sys; shutil.rmtree(sys.argv[1])\" build",
        "ask",
    ),
    ("perl -e 'system(\"rm -rf ~\")'", "deny"),
    (
        "ruby -e 'require \"fileutils\"; FileUtils.rm_rf(Dir.home)'",
        "deny",
    ),
    (
        "node -e \"require('fs').rmSync(process.env.HOME, {recursive: true})\"",
        "deny",
    ),
    ("python3 -c 'print(6 * 7)'", "allow"),
    // Harmless forms: image files, --help, deletes inside the workdir.
    ("mkfs.ext4 -q -F disk.img", "allow"),
    ("dd if=/dev/zero of=./out.bin bs=1k count=1", "allow"),
    ("rm --help", "allow"),
    ("mkfs --help", "allow"),
    ("dd --version", "allow"),
    ("mkdir -p build/x && rm -rf ./build", "allow"),
    ("rm -rf target", "allow"),
    // What cannot be parsed cannot be checked.
    ("echo 'unterminated", "ask"),
];
