"""Runs a command with its stdout copied, byte for byte, to a file as well as to ours: what a
test reads afterwards to check that a server wrote nothing but JSON-RPC frames there.

    python tests/stdout_tap.py COPY -- COMMAND...
"""

from __future__ import annotations

import signal
import subprocess
import sys


def main() -> int:
    copy_to, command = sys.argv[1], sys.argv[3:]
    process = subprocess.Popen(command, stdout=subprocess.PIPE)
    # A signal for us is one for the server (the harness stops it so).
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda n, _f: process.send_signal(n))
    assert process.stdout is not None
    with open(copy_to, "wb") as copy:
        while chunk := process.stdout.read1(65536):
            sys.stdout.buffer.write(chunk)
            sys.stdout.buffer.flush()
            copy.write(chunk)
            copy.flush()
    return process.wait()


if __name__ == "__main__":
    sys.exit(main())
