"""The update phase hands the backend what the config says: the log-probs' temperature is the sampling one
(``tasks.temperature``), and every row keeps its task kind and role for AZR's mini-batch layout."""

from populora.training import load_config
from populora.training.phases.rollout import Rollout
from populora.training.phases.update import update


class _Recorder:
    def train_step(self, batches, micro_batch, max_len, grad_clip, kl_coef, log_kl, **options):
        self.batches, self.options = batches, options
        return {n: {"loss": 0.0, "per_mini_batch": []} for n in batches}


def test_update_passes_the_sampling_temperature_and_azrs_layout():
    cfg = load_config(None, ["tasks.temperature=0.6", "optim.mini_batch_size=4", "optim.loss_agg=micro-token-mean",
                             "optim.kl_estimator=k2", "optim.clip_ratio_c=3"])
    rollouts = [Rollout("T0", "teacher", "code_i", "t1", [1], [2, 3], "", reward=1.0),
                Rollout("T0", "student", "code_o", "t2", [1], [4], "", reward=0.0),
                Rollout("T0", "student", "code_o", "t3", [1], [], "", reward=1.0)]  # empty: not trained
    backend = _Recorder()
    update(backend, rollouts, cfg)
    opts = backend.options
    assert (opts["temperature"], opts["mini_batch_size"], opts["loss_agg"], opts["kl_estimator"], opts["clip_ratio_c"]) == (
        0.6, 4, "micro-token-mean", "k2", 3.0)
    assert [(s.kind, s.role, s.completion_ids) for s in backend.batches["T0"]] == [("code_i", "teacher", [2, 3]),
                                                                                    ("code_o", "student", [4])]
