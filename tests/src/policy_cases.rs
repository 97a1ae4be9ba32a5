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
    // Asking a process outside the sandbox to run something: refused
    // whatever the wrapper (issue 31). The payloads are harmless.
    ("tmux -L flyto-e2e run-shell 'true'", "deny"),
    ("tmux -L flyto-e2e new-session -d 'true'", "deny"),
    ("tmux -L flyto-e2e send-keys -t 0 true Enter", "deny"),
    ("tmux -L flyto-e2e ls", "deny"),
    ("screen -S flyto-e2e -X stuff 'true'", "deny"),
    ("screen -dmS flyto-e2e true", "deny"),
    ("at now <<< 'true'", "deny"),
    ("echo true | batch", "deny"),
    ("crontab ./no-such-jobs.txt", "deny"),
    ("systemd-run --user true", "deny"),
    ("systemctl --user link ./no-such.service", "deny"),
    ("systemctl --user restart flyto-e2e-none.service", "ask"),
    (
        "dbus-send --session --dest=org.freedesktop.DBus / org.freedesktop.DBus.Peer.Ping",
        "deny",
    ),
    (
        "busctl --user call org.freedesktop.DBus / org.freedesktop.DBus.Peer Ping",
        "deny",
    ),
    (
        "gdbus call --session --dest org.freedesktop.DBus --object-path / --method org.freedesktop.DBus.Peer.Ping",
        "deny",
    ),
    ("emacsclient -e '(kill-emacs)'", "deny"),
    ("xdg-open ./no-such.desktop", "deny"),
    ("ssh -o BatchMode=yes localhost true", "deny"),
    ("scp ./ok-marker 127.0.0.1:/tmp/", "deny"),
    ("env tmux -L flyto-e2e run-shell true", "deny"),
    ("command tmux -L flyto-e2e run-shell true", "deny"),
    ("/usr/bin/tmux -L flyto-e2e run-shell true", "deny"),
    ("bash -c 'tmux -L flyto-e2e run-shell true'", "deny"),
    ("sh -c \"screen -S flyto-e2e -X stuff true\"", "deny"),
    ("echo run-shell | xargs tmux -L flyto-e2e", "deny"),
    (
        "find . -maxdepth 0 -exec tmux -L flyto-e2e run-shell true \\;",
        "deny",
    ),
    (
        "script -qc 'tmux -L flyto-e2e run-shell true' /dev/null",
        "deny",
    ),
    ("nohup systemd-run --user true", "deny"),
    // Code that git and other programs run from configuration.
    ("git -c core.pager='rm -rf ~' log", "deny"),
    ("git -c alias.x='!rm -rf ~' x", "deny"),
    (
        "git -c core.sshCommand='tmux -L flyto-e2e run-shell true' fetch",
        "deny",
    ),
    ("GIT_PAGER='rm -rf ~' git log", "deny"),
    ("git -c core.pager=\"$P\" log", "ask"),
    // `find`: the start paths and the action decide, not the filters.
    ("find ~ -type f -delete", "deny"),
    ("find ~ -name '*' -delete", "deny"),
    ("find ~ -mindepth 1 -exec rm -rf {} +", "deny"),
    ("find . -type f -delete", "deny"),
    ("find ~ ! -name ok-marker -delete", "deny"),
    ("find / -name '*.flyto-e2e' -delete", "deny"),
    ("find ~ -type f -exec chmod 000 {} +", "deny"),
    ("find ~ -exec chown nobody {} +", "deny"),
    ("find / -exec chmod 777 {} +", "deny"),
    // Destructive commands whose target is computed.
    ("rm -rf \"$(echo ~)\"", "ask"),
    ("rm -rf `echo ~`", "ask"),
    ("rm -rf \"$TARGET\"", "ask"),
    ("rm -rf ${TARGET}", "ask"),
    ("rm -rf ~root", "deny"),
    ("rm -rf ~/[a-z]*", "deny"),
    ("rm -rf $(pwd)", "deny"),
    ("chmod -R 777 \"$(echo ~)\"", "ask"),
    // Look-alikes that stay allowed.
    ("tmux -V", "allow"),
    ("echo tmux run-shell", "allow"),
    (
        "git -c user.name=x -c user.email=x@example.com status",
        "allow",
    ),
    ("GIT_PAGER=cat git log -1", "allow"),
    ("find . -name x -print", "allow"),
    ("find . -exec grep -l foo {} +", "allow"),
    ("find . -name '*.o' -delete", "allow"),
    ("find . -name '*.sh' -exec chmod +x {} +", "allow"),
    ("mkdir -p gen && find gen -type f -delete", "allow"),
    ("rm \"$TMPDIR/x\"", "allow"),
    ("rm -rf \"$TMPDIR/flyto-e2e-build\"", "allow"),
    ("rm -rf \"$(pwd)/build\"", "allow"),
    ("echo $(date)", "allow"),
    ("DIR=gen-a; mkdir -p \"$DIR\" && rm -rf \"$DIR\"", "allow"),
    ("for d in gen-b gen-c; do rm -rf \"$d\"; done", "allow"),
    ("D=~; rm -rf \"$D\"", "ask"),
    ("for d in gen-d ~; do rm -rf \"$d\"; done", "ask"),
    ("for d in gen-d /; do rm -rf \"$d\"; done", "deny"),
    (
        "find . -name vendor -prune -o -name '*.tmp' -delete",
        "allow",
    ),
    ("chown -R \"$(id -u)\" ./gen-e", "allow"),
    ("script -qc 'echo hi' /dev/null", "allow"),
];
