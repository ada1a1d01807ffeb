"""tests/conftest.py reaps the processes tests start: a failure between starting children
and waiting for them never leaves them running."""
import os
import subprocess
import sys
import time

import conftest


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_reap_kills_a_child_and_everything_it_started():
    proc = subprocess.Popen([sys.executable, "-c",
                             "import subprocess, sys, time\n"
                             "subprocess.Popen([sys.executable, '-c', "
                             "'import time; time.sleep(300)'])\n"
                             "print('ready', flush=True)\n"
                             "time.sleep(300)\n"],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    grandchildren = conftest._descendants(proc.pid)
    assert grandchildren or not os.path.isdir("/proc")
    conftest.reap(proc)
    assert proc.returncode is not None
    deadline = time.time() + 10
    while any(_alive(pid) for pid in grandchildren) and time.time() < deadline:
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in grandchildren)


def test_processes_a_test_starts_are_recorded_for_reaping():
    before = len(conftest._STARTED)
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    started = conftest._STARTED[before:]
    assert [p for p, _ in started] == [proc]
    assert started[0][1] is False   # started by the test, not by s2sgrad: always reaped
    subprocess.run([sys.executable, "-c", "pass"], check=True)   # subprocess.run too
    assert len(conftest._STARTED) == before + 2
