"""Two worker processes, each with its own gate, on one study in a
PostgreSQL storage: the multi-host setup of docs/optuna.md on one machine
(each worker stands for a GPU host; here they share one budget file, as two
workers on one GPU would). Starts its own server with initdb and pg_ctl;
skips, saying why, where that cannot be done."""

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import memreplay  # noqa: E402
from test_optuna import check_study, need_cli, need_optuna, run_workers  # noqa: E402

BINDIRS = ["/usr/local/bin", "/usr/lib/postgresql/15/bin"]


def pg_tool(name):
    for d in BINDIRS:
        p = os.path.join(d, name)
        if os.access(p, os.X_OK):
            return p
    return shutil.which(name)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresWorkers(unittest.TestCase):
    def setUp(self):
        need_optuna(self)
        need_cli(self)
        try:
            import psycopg2  # noqa: F401
        except ImportError:
            self.skipTest("psycopg2 is not installed for this interpreter (Debian: apt-get install python3-psycopg2)")
        initdb, pg_ctl = pg_tool("initdb"), pg_tool("pg_ctl")
        if not initdb or not pg_ctl:
            self.skipTest("PostgreSQL's initdb and pg_ctl are not installed (Debian: apt-get install postgresql)")
        self.dir = tempfile.mkdtemp(prefix="memreplay-pg-")
        run_as = []
        if os.geteuid() == 0:  # the server refuses to run as root
            try:
                import pwd
                pw = pwd.getpwnam("postgres")
            except KeyError:
                self.skipTest("running as root and there is no postgres user to run the server as")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
            run_as = ["runuser", "-u", "postgres", "--"]
        self.run_as, self.pg_ctl = run_as, pg_ctl
        data = os.path.join(self.dir, "data")
        self.data = data
        self.port = free_port()
        p = subprocess.run(run_as + [initdb, "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8"],
                           capture_output=True, text=True)
        if p.returncode != 0:
            self.skipTest("initdb failed, no server to test with: " + p.stderr.strip()[-500:])
        opts = f"-k {self.dir} -p {self.port} -c listen_addresses='' -c fsync=off"
        p = subprocess.run(run_as + [pg_ctl, "-D", data, "-o", opts, "-l", os.path.join(self.dir, "log"), "-w", "-t", "60", "start"],
                           capture_output=True, text=True)
        if p.returncode != 0:
            log = ""
            try:
                with open(os.path.join(self.dir, "log")) as f:
                    log = f.read()[-500:]
            except OSError:
                pass
            self.skipTest("the PostgreSQL server did not start: " + (p.stderr.strip() + " " + log)[-800:])
        self.addCleanup(self.stop)

    def stop(self):
        subprocess.run(self.run_as + [self.pg_ctl, "-D", self.data, "-m", "immediate", "-w", "stop"], capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_two_workers_one_study_one_killed(self):
        url = f"postgresql+psycopg2://postgres@/postgres?host={self.dir}&port={self.port}"
        budget = 20 << 30
        trials, killed = run_workers(self, url, 2, budget, 12, kill_one=True, n_jobs=2)
        check_study(self, trials, budget, 12, killed, n_jobs=2)


if __name__ == "__main__":
    unittest.main()
