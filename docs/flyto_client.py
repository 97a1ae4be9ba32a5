#!/usr/bin/env python3
"""A minimal flytod client for the JSON-lines protocol (docs/protocol.md).

Usage:
    python3 docs/flyto_client.py ping
    python3 docs/flyto_client.py run 'echo hello'     # submit a plan, follow it, print its output
    python3 docs/flyto_client.py new                  # a new session in the current directory
    python3 docs/flyto_client.py send s1 'hello'      # stream a session's reply

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


def run(flyto, command):
    """Submits a one-step plan, follows it to the end, prints its output."""
    # Fields that are null may be left out in JSON mode.
    plan = {"steps": [{"id": "main", "run": command, "workdir": os.getcwd()}]}
    _, submitted = flyto.call("submit_plan", plan=plan)
    plan_id = submitted["id"]
    print(f"submitted {plan_id}", file=sys.stderr)
    for kind, body in flyto.stream("plan_watch", id=plan_id):
        # First the snapshot (`plan`), then an `event` per change.
        view = body["plan"] if kind == "plan" else body["event"]["plan_updated"]["plan"]
    step = view["steps"][0]
    sys.stdout.write(step["stdout_tail"])
    print(f"{plan_id} {view['state']} (exit code {step['exit_code']})", file=sys.stderr)
    return 0 if view["state"] == "succeeded" else 1


def send(flyto, session, text):
    """Sends a message to a session and streams the reply until the run ends."""
    status = 0
    for _, body in flyto.stream("session_send", id=session, text=text):
        (kind, event), = body["event"]["session"]["event"].items()
        if kind == "text":
            print(event["delta"], end="", flush=True)
        elif kind == "tool_call":
            print(f"\n[{event['name']} {event['arguments']}]", file=sys.stderr)
        elif kind in ("error", "cancelled"):
            print(f"\n{kind}: {event['message']}", file=sys.stderr)
            status = 1
        elif kind == "done":
            print(f"\n[{event['stop']}] {event['message']}", file=sys.stderr)
    return status


def main(argv):
    try:
        flyto = Flyto()
        if argv[1:2] == ["ping"]:
            _, pong = flyto.call("ping")
            print(f"flytod {pong['daemon_version']} pid {pong['pid']}")
            return 0
        if argv[1:2] == ["run"] and len(argv) == 3:
            return run(flyto, argv[2])
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
