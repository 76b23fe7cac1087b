"""An Optuna study's space in memreplay's spelling, and `memreplay par
--optuna-storage` answering for it."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from test_optuna import need_cli, need_optuna  # noqa: E402

import memreplay  # noqa: E402


def make_study(url):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name="hf", storage=url)

    def objective(t):
        t.suggest_categorical("model_name_or_path", ["bert-base-uncased", "roberta-large"])
        t.suggest_int("per_device_train_batch_size", 8, 32, step=8)
        t.suggest_float("learning_rate", 1e-5, 1e-3, log=True)
        t.suggest_categorical("fp16", [True, False])
        return 0.0

    study.optimize(objective, n_trials=6)
    return study


class Space(unittest.TestCase):
    def setUp(self):
        need_optuna(self)
        self.url = "sqlite:///" + os.path.join(tempfile.mkdtemp(), "s.db")
        self.study = make_study(self.url)

    def test_space_from_study(self):
        from memreplay.space import space_from_study

        space, notes = space_from_study(self.study, fixed={"seq_len": 256})
        self.assertEqual(space["models"], ["bert-base-uncased", "roberta-large"])
        self.assertEqual(space["choices"], {"batch_sizes": [8, 16, 24, 32], "precisions": ["fp16", "fp32"], "seq_lens": [256]})
        self.assertIn("ignored: learning_rate", notes[0])
        self.assertIn("6 trials", notes[1])
        with self.assertRaisesRegex(ValueError, "no parameter for seq_len"):
            space_from_study(self.study)
        with self.assertRaisesRegex(ValueError, "searches it already"):
            space_from_study(self.study, fixed={"seq_len": 128, "batch": 8})
        with self.assertRaisesRegex(ValueError, "is a float"):
            space_from_study(self.study, fixed={"seq_len": 128}, names={"batch": "learning_rate"})

    def test_par_answers_for_the_study(self):
        need_cli(self)
        env = dict(os.environ, PYTHONPATH=os.path.dirname(HERE), MEMREPLAY_PYTHON=sys.executable)
        cmd = [memreplay.binary_path(), "par", "--optuna-storage", self.url, "--study", "hf",
               "--optuna-fixed", "seq_len=128", "--max-par", "2", "--mixes", "2", "--steps", "1",
               "--trials-per-worker", "1", "--alloc-conf", "", "--format", "json"]
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        rep = json.loads(p.stdout)
        self.assertIn('Optuna study \\"hf\\"', json.dumps(rep))
        self.assertIn("ignored: learning_rate", p.stderr)
        bad = subprocess.run(cmd[:6] + ["--max-par", "1"], env=env, capture_output=True, text=True, timeout=300)
        self.assertEqual(bad.returncode, 2)
        self.assertIn("no parameter for seq_len", bad.stderr)
        gone = subprocess.run(cmd[:4] + ["--study", "nope"], env=env, capture_output=True, text=True, timeout=300)
        self.assertEqual(gone.returncode, 2)
        self.assertIn("nope", gone.stderr)


if __name__ == "__main__":
    unittest.main()
