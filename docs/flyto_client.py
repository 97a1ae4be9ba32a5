#!/usr/bin/env python3
"""A minimal flytod client for the JSON-lines protocol (docs/protocol.md).

Usage:
    python3 docs/flyto_client.py ping
    python3 docs/flyto_client.py run 'echo hello'     # submit a plan, follow it, print its output
    python3 docs/flyto_client.py run --env K=V 'cmd'  # ... with K=V in its environment (repeatable)
    python3 docs/flyto_client.py restart p3           # a new plan from p3's spec, followed the same way
    python3 docs/flyto_client.py remove p3            # delete a finished plan and its logs
    python3 docs/flyto_client.py new                  # a new session in the current directory
    python3 docs/flyto_client.py send s1 'hello'      # stream a session's reply; asks y/N for `ask` rules
    python3 docs/flyto_client.py delete s1            # delete a session that is not running

Like flytoctl, `run` passes the current directory as the step's workdir
and your PATH, VIRTUAL_ENV, CONDA_PREFIX and CONDA_DEFAULT_ENV in the
plan's env (flytod's own environment, under systemd, differs from your
shell's); --env values win over them.

The socket is found as flytoctl finds it: FLYTO_PLAN_SOCK, FLYTO_SOCK,
$RUNTIME_DIRECTORY, $XDG_RUNTIME_DIR/flyto, /run/flyto (root), /tmp/flyto-<uid>.
"""

import json
import os
import socket
import sys


def socket_path():
    for var in ("FLYTO_PLAN_SOCK", "FLYTO_SOCK"):
        if os.environ.get(var):
            return os.environ[var]
    if os.environ.get("RUNTIME_DIRECTORY"):
        return os.path.join(os.environ["RUNTIME_DIRECTORY"].split(":")[0], "flytod.sock")
    if os.environ.get("XDG_RUNTIME_DIR"):
        return os.path.join(os.environ["XDG_RUNTIME_DIR"], "flyto", "flytod.sock")
    if os.getuid() == 0:
        return "/run/flyto/flytod.sock"
    return f"/tmp/flyto-{os.getuid()}/flytod.sock"


class FlytoError(Exception):
    def __init__(self, code, message):
        super().__init__(f"{code}: {message}")
        self.code = code


class Flyto:
    def __init__(self, path=None):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path or socket_path())
        self.lines = self.sock.makefile("r", encoding="utf-8")

    def send(self, op, **fields):
        """Sends one request: one JSON object {"<op>": {fields}} on one line."""
        line = json.dumps({op: fields}) + "\n"
        self.sock.sendall(line.encode("utf-8"))

    def recv(self):
        """The next response as (kind, body); raises FlytoError on an error."""
        line = self.lines.readline()
        if not line:
            raise ConnectionError("flytod closed the connection")
        (kind, body), = json.loads(line).items()
        if kind == "error":
            raise FlytoError(body["code"], body["message"])
        return kind, body

    def call(self, op, **fields):
        """A request with exactly one response."""
        self.send(op, **fields)
        return self.recv()

    def stream(self, op, **fields):
        """A streaming request: yields every response until `end`."""
        self.send(op, **fields)
        while True:
            kind, body = self.recv()
            if kind == "end":
                return
            yield kind, body


# What flytoctl takes from the submitter's environment: enough to run the
# same programs (and the same virtualenv) however flytod was started.
CAPTURED_ENV = ("PATH", "VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV")


def run(flyto, command, env=None):
    """Submits a one-step plan, follows it to the end, prints its output."""
    plan_env = {k: os.environ[k] for k in CAPTURED_ENV if os.environ.get(k)}
    plan_env.update(env or {})
    # Fields that are null (or empty, like `deps`) may be left out in JSON
    # mode. The daemon wants an absolute workdir: it does not know ours.
    plan = {
        "steps": [{"id": "main", "run": command, "workdir": os.getcwd()}],
        "env": plan_env,
    }
    _, submitted = flyto.call("submit_plan", plan=plan)
    return follow(flyto, submitted["id"])


def follow(flyto, plan_id):
    """Watches a plan until it is terminal, prints its first step's output."""
    print(f"submitted {plan_id}", file=sys.stderr)
    for kind, body in flyto.stream("plan_watch", id=plan_id):
        # First the snapshot (`plan`), then an `event` per change.
        view = body["plan"] if kind == "plan" else body["event"]["plan_updated"]["plan"]
    step = view["steps"][0]
    sys.stdout.write(step["stdout_tail"])
    print(f"{plan_id} {view['state']} (exit code {step['exit_code']})", file=sys.stderr)
    return 0 if view["state"] == "succeeded" else 1


FAILED_STOPS = ("max_iterations", "budget", "repeat_guard", "stalled", "compact_failed", "breaker_open")


def approve(session, event):
    """Asks on the terminal whether an `ask` command may run; answers it on
    a second connection, since this one is busy streaming the run."""
    print(f"\napproval needed: `{event['command']}` ({event['rule']})", file=sys.stderr)
    try:
        with open("/dev/tty") as tty:
            print("allow it? [y/N] ", end="", file=sys.stderr, flush=True)
            allow = tty.readline().strip().lower() in ("y", "yes")
    except OSError:
        allow = False
    try:
        Flyto().call("session_approve", id=session, approval=event["approval"], allow=allow)
    except FlytoError as e:
        # Someone else answered first, or it timed out meanwhile.
        print(f"answer not taken: {e}", file=sys.stderr)


def send(flyto, session, text):
    """Sends a message to a session and streams the reply until the run ends."""
    status = 0
    # Only a client with a person behind it offers to approve `ask` rules;
    # otherwise they are refused at once and the model is told.
    can_approve = os.path.exists("/dev/tty") and sys.stdin.isatty()
    for _, body in flyto.stream("session_send", id=session, text=text, can_approve=can_approve):
        (kind, event), = body["event"]["session"]["event"].items()
        if kind == "text":
            print(event["delta"], end="", flush=True)
        elif kind == "tool_call":
            print(f"\n[{event['name']} {event['arguments']}]", file=sys.stderr)
        elif kind == "approval_requested":
            approve(session, event)
        elif kind == "approval_resolved":
            print(f"[approval {event['approval']}: {event['outcome']}]", file=sys.stderr)
        elif kind == "cancelled":
            print(f"\ncancelled: {event['message']}", file=sys.stderr)
            # Like flytoctl: 6 when flytod shut down during the run.
            status = 6 if event["shutdown"] else 5
        elif kind == "error":
            print(f"\nerror: {event['message']}", file=sys.stderr)
            status = 1
        elif kind == "done":
            print(f"\n[{event['stop']}] {event['message']}", file=sys.stderr)
            # A guard or a failed compaction stopped the run: exit 1, as flytoctl does.
            if event["stop"] in FAILED_STOPS:
                status = 1
    return status


def main(argv):
    try:
        flyto = Flyto()
        if argv[1:2] == ["ping"]:
            _, pong = flyto.call("ping")
            print(f"flytod {pong['daemon_version']} pid {pong['pid']}")
            return 0
        if argv[1:2] == ["run"] and len(argv) >= 3:
            env, args = {}, argv[2:]
            while len(args) > 2 and args[0] == "--env" and "=" in args[1]:
                key, _, value = args[1].partition("=")
                env[key] = value
                args = args[2:]
            if len(args) == 1:
                return run(flyto, args[0], env)
        if argv[1:2] == ["restart"] and len(argv) == 3:
            _, submitted = flyto.call("plan_restart", id=argv[2])
            return follow(flyto, submitted["id"])
        if argv[1:2] == ["remove"] and len(argv) == 3:
            _, body = flyto.call("plan_remove", id=argv[2])
            print(f"removed {body['id']}")
            return 0
        if argv[1:2] == ["delete"] and len(argv) == 3:
            _, body = flyto.call("session_delete", id=argv[2])
            print(f"deleted {body['id']}")
            return 0
        if argv[1:2] == ["new"]:
            _, body = flyto.call("session_new", workdir=os.getcwd())
            print(body["session"]["id"])
            return 0
        if argv[1:2] == ["send"] and len(argv) == 4:
            return send(flyto, argv[2], argv[3])
    except FlytoError as e:
        print(f"refused: {e}", file=sys.stderr)
        return 4
    except OSError as e:
        print(f"cannot talk to flytod at {socket_path()}: {e}", file=sys.stderr)
        return 3
    sys.exit(__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
