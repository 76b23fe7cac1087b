"""The loop of docs/optuna.md and README.md runs as written, against real
Optuna, with a train() that sleeps (no GPU here)."""

import os
import re
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from test_optuna import need_cli, need_optuna  # noqa: E402


def loop(path):
    with open(path) as f:
        text = f.read()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "study.optimize(cb.wrap(objective)" in b]
    assert len(blocks) == 1, f"{path}: one Python block with the loop, found {len(blocks)}"
    return blocks[0]


class Loop(unittest.TestCase):
    def test_readme_and_docs_agree_and_run(self):
        need_optuna(self)
        need_cli(self)
        import optuna

        code = loop(os.path.join(REPO, "docs", "optuna.md"))
        self.assertEqual(code, loop(os.path.join(REPO, "README.md")))
        self.assertLessEqual(len(code.strip().splitlines()), 15)
        tmp = tempfile.mkdtemp()
        run = (code.replace("n_trials=100", "n_trials=8")
               .replace("/tmp/memreplay-gpu0.budget", os.path.join(tmp, "gpu0.budget"))
               .replace("sqlite:///study.db", "sqlite:///" + os.path.join(tmp, "study.db")))
        self.assertEqual(run.count(tmp), 2)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        ns = {"train": lambda batch, lr: time.sleep(0.02 * batch / 8) or batch * lr}
        exec(compile(run, "docs/optuna.md", "exec"), ns)
        trials = ns["study"].get_trials()
        self.assertEqual(len(trials), 8)
        for t in trials:
            self.assertEqual(t.state, optuna.trial.TrialState.COMPLETE)
            self.assertGreater(t.user_attrs["memreplay_need_bytes"], 4 << 30)
        self.assertEqual(ns["gate"].held(), (0, 0))


if __name__ == "__main__":
    unittest.main()
