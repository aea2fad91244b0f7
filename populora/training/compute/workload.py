"""The work of one training step counted from a config, and the plan built on it (``populora plan``).

Counts follow the loop: every teacher proposes ``tasks_per_teacher`` tasks (propose.py); each student draws
``min(teachers_per_student, teachers)`` distinct teachers and answers each of their tasks ``rollouts`` times
(matchmaking.py, solve.py); a teacher no student drew gets one student. With equal ratings (every PFSP scheme
is then uniform) a teacher is left undrawn with probability (1 - k/T)^S, so the expected extra matches are
T (1 - k/T)^S. With ``tasks.answers_per_task`` every task gets exactly that many answers instead. The single-agent
baseline is one teacher matched with itself. Token counts are upper bounds
(every task valid, every completion at its budget); prompt lengths are estimates (PROMPT_TOKENS).
Every rollout is trained on, so trained tokens are the generated rows at prompt + completion (<= max_seq_len).
"""

from __future__ import annotations

import dataclasses
import math

from populora.platform import plan
from populora.training.config import TrainConfig

# Prompt tokens (estimates from the prompt templates): instructions plus each reference task shown.
PROPOSE_BASE, PER_REFERENCE, SOLVE_PROMPT = 250, 150, 300


def counts(cfg: TrainConfig) -> dict:
    """Expected rows per step: propose rows, solve rows, and adapters (whole population)."""
    pc, tc = cfg.population, cfg.tasks
    if pc.single_agent:
        per_task = tc.answers_per_task or tc.rollouts
        return {"adapters": 1, "propose_rows": tc.tasks_per_teacher, "solve_rows": tc.tasks_per_teacher * per_task}
    t, s = pc.teachers, pc.students
    if tc.answers_per_task is not None:  # exactly n answers per task, whoever gives them
        return {"adapters": t + s, "propose_rows": t * tc.tasks_per_teacher,
                "solve_rows": t * tc.tasks_per_teacher * tc.answers_per_task}
    k = min(cfg.matchmaking.teachers_per_student, t)
    matches = s * k + t * (1 - k / t) ** s
    return {"adapters": t + s, "propose_rows": t * tc.tasks_per_teacher,
            "solve_rows": matches * tc.tasks_per_teacher * tc.rollouts}


def solver_batch_rows(cfg: TrainConfig) -> int:
    """solver.data buffer: the answers students train on, beyond the estimation answers (which are then not trained)."""
    if cfg.solver.data != "buffer":
        return 0
    students = 1 if cfg.population.single_agent else cfg.population.students
    return students * len(cfg.tasks.kinds) * cfg.solver.batch_per_kind


def workload(cfg: TrainConfig, gpus: int = 1, placement: str = "by_member") -> plan.Workload:
    """``placement`` data_parallel: every GPU holds every adapter (and its optimizer state); by_member: its share."""
    mc, tc, oc = cfg.model, cfg.tasks, cfg.optim
    c = counts(cfg)
    extra = solver_batch_rows(cfg)
    n = c["adapters"]
    # multilora allocates n + 1 slots (slot 0 is the bare base); evolution removes the dead member before adding
    # its child, which takes the freed slot, so the slots never grow (PEFT: one adapter each, n at any time)
    slots = n + 1 if mc.backend == "multilora" else n
    return plan.Workload(
        adapters=n, lora_slots=slots, adapters_per_gpu=n if placement == "data_parallel" else math.ceil(n / gpus),
        propose_rows=c["propose_rows"], solve_rows=c["solve_rows"] + extra,
        untrained_solve_rows=c["solve_rows"] if extra else 0,
        propose_prompt=PROPOSE_BASE + PER_REFERENCE * tc.references, solve_prompt=SOLVE_PROMPT,
        propose_new=tc.max_new_tokens_propose, solve_new=tc.max_new_tokens_solve,
        micro_batch=oc.micro_batch, max_seq_len=oc.max_seq_len,
        kl_forward=1.0 if oc.kl_coef > 0 else (1.0 / oc.kl_every if oc.log_kl else 0.0),
        vllm=mc.generation == "vllm", vllm_fraction=mc.vllm_gpu_memory, checkpointing=mc.activation_checkpointing,
    )


def member_flops(arch: plan.Architecture, cfg: TrainConfig, work: plan.Workload) -> list[dict]:
    """FLOPs of one step per member, in creation order (teachers, then students; the Trainer's order): a teacher
    generates and trains its proposals, a student its share of the answers (generated, and trained but for its
    share of the untrained estimation answers)."""
    def one(propose, solve, untrained):
        return plan.step_flops(arch, dataclasses.replace(work, propose_rows=propose, solve_rows=solve,
                                                         untrained_solve_rows=untrained))
    pc = cfg.population
    if pc.single_agent:
        return [one(work.propose_rows, work.solve_rows, work.untrained_solve_rows)]
    # a student's share of the answers, and of those not trained on (solver.data buffer: the estimation answers)
    return ([one(work.propose_rows / pc.teachers, 0, 0)] * pc.teachers
            + [one(0, work.solve_rows / pc.students, work.untrained_solve_rows / pc.students)] * pc.students)


def make_plan(cfg: TrainConfig, gpu: str = "h100-80gb", gpus: int = 1, arch_config: str | None = None) -> dict:
    """The whole plan as one JSON-able dict (the keys ``populora plan --json`` promises)."""
    if gpu not in plan.GPUS:
        raise plan.PlanError(f"unknown --gpu {gpu!r}; choose one of {', '.join(plan.GPUS)}")
    mc = cfg.model
    arch, source = plan.find_architecture(mc.base, arch_config)
    g = plan.GPUS[gpu]
    placements = {p: placed(cfg, arch, g, gpus, p) for p in ("data_parallel", "by_member")}
    chosen = cfg.ray.placement  # resolved from auto by the config's validation
    work, flops = workload(cfg, gpus, chosen), plan.step_flops(arch, workload(cfg, gpus, chosen))
    memory, fits, advice = (placements[chosen][k] for k in ("memory_gb", "fits", "advice"))
    times, speedup = placements[chosen]["step_time_split_s"], placements[chosen]["gpu_speedup"]
    rows = {"propose": (work.propose_rows, work.propose_prompt, work.propose_new),
            "solve": (work.solve_rows, work.solve_prompt, work.solve_new)}
    generated = {k: r * new for k, (r, _, new) in rows.items()}
    trained = sum(r * work.trained_len(p, new) for r, p, new in plan.trained_rows(work))
    n = work.adapters
    return {
        "config": cfg.name, "model": mc.base, "architecture_from": source, "gpu": gpu, "gpus": gpus,
        "params_b": arch.params() / 1e9, "lora_params_m": arch.lora_params(mc.lora_rank, mc.target_modules) / 1e6,
        "memory_gb": memory, "usable_gb": g.usable_gb, "fits": fits, "advice": advice,
        "per_step": {"propose_rows": work.propose_rows, "solve_rows": work.solve_rows,
                     "generated_tokens": sum(generated.values()), "trained_tokens": trained,
                     "tflops": {k: v / 1e12 for k, v in flops.items()}},
        "per_adapter": {"generated_tokens": sum(generated.values()) / n, "propose_tokens": generated["propose"] / n,
                        "solve_tokens": generated["solve"] / n, "trained_tokens": trained / n,
                        "tflops": (flops["generate"] + flops["train"]) / n / 1e12},
        "step_time_s": times["total"], "step_time_split_s": times, "gpu_speedup": speedup,
        "placement": chosen, "placements": placements,
        "utilisation": {k: v for k, v in plan.MFU.items()},
    }


def placed(cfg: TrainConfig, arch: plan.Architecture, g: plan.Gpu, gpus: int, placement: str) -> dict:
    """Memory per worker, step time and speedup of one ``ray.placement`` on ``gpus`` GPUs: data_parallel deals
    every phase's rows over all GPUs (each holds every adapter, gradients all-reduced); by_member places members
    (a member never spans GPUs)."""
    mc = cfg.model
    work = workload(cfg, gpus, placement)
    memory = plan.memory_gb(arch, work, mc.dtype, mc.target_modules, mc.lora_rank, g)
    flops = plan.step_flops(arch, work)
    if placement == "data_parallel":
        speedup = plan.data_parallel_speedup(work, gpus)
    else:
        speedup = plan.placement_speedup(member_flops(arch, cfg, work), gpus)
    times = plan.step_time_s(flops, work, mc.dtype, g, speedup)
    if placement == "data_parallel":
        lora = arch.lora_params(mc.lora_rank, mc.target_modules) * plan.LORA_BYTES
        times["allreduce"] = plan.allreduce_s(lora, work.adapters, cfg.optim.mini_batches, gpus)
        times["total"] += times["allreduce"]
    fits, advice = plan.verdict(memory, g, arch, work, mc.dtype, mc.target_modules)
    return {"memory_gb": memory, "fits": fits, "advice": advice, "step_time_s": times["total"],
            "step_time_split_s": times, "gpu_speedup": speedup}


def seconds(s: float) -> str:
    """A plan's time, readable at every scale (a tiny model's step is milliseconds, not "0 s").

    >>> seconds(0.004), seconds(0.37), seconds(4.26), seconds(95.2)
    ('<0.01 s', '0.37 s', '4.3 s', '95 s')
    """
    return "<0.01 s" if s < 0.01 else f"{s:.2f} s" if s < 1 else f"{s:.1f} s" if s < 10 else f"{s:.0f} s"


def render(p: dict) -> str:
    """The plan as a short human-readable table."""
    m, ps, pa = p["memory_gb"], p["per_step"], p["per_adapter"]
    lines = [f"plan of {p['config']}: {p['model']} ({p['params_b']:.2f}B params, architecture from {p['architecture_from']}), "
             f"{p['gpus']} x {p['gpu']}",
             "memory per GPU (GB):"]
    lines += [f"  {k:14} {v:8.2f}" for k, v in m.items()]
    lines += [f"  {'usable':14} {p['usable_gb']:8.2f}",
              f"per step: {ps['propose_rows']:.0f} proposals + {ps['solve_rows']:.0f} answers, "
              f"{ps['generated_tokens'] / 1e6:.2f}M generated tokens, {ps['trained_tokens'] / 1e6:.2f}M trained tokens",
              f"per adapter: {pa['generated_tokens'] / 1e3:.1f}k generated ({pa['propose_tokens'] / 1e3:.1f}k propose, "
              f"{pa['solve_tokens'] / 1e3:.1f}k solve), {pa['trained_tokens'] / 1e3:.1f}k trained, {pa['tflops']:.0f} TFLOPs",
              f"step time: ~{seconds(p['step_time_s'])} (generate {seconds(p['step_time_split_s']['generate'])}, "
              f"train {seconds(p['step_time_split_s']['train'])}; assumed utilisation "
              + ", ".join(f"{k.replace('_', ' ')} {v:.0%}" for k, v in p["utilisation"].items()) + ")",
              ("FITS: " if p["fits"] else "DOES NOT FIT: ") + p["advice"]]
    if p["gpus"] > 1:
        for name, q in p["placements"].items():
            sp = q["gpu_speedup"]
            how = "rows dealt over every GPU" if name == "data_parallel" else "a member never spans GPUs"
            lines.insert(-1, f"{'*' if name == p['placement'] else ' '} ray.placement={name:13} ~{q['step_time_s']:.0f} s/step, "
                             f"{sp['generate']:.2f}x generate, {sp['train']:.2f}x train ({how}), "
                             f"{q['memory_gb']['total']:.1f} GB per worker{'' if q['fits'] else ' DOES NOT FIT'}")
    return "\n".join(lines)
