"""Population members: a LoRA adapter with a role, a TrueSkill rating and a lineage record."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from populora.training import rating as ratings

TEACHER, STUDENT, BOTH = "teacher", "student", "both"  # BOTH: the single-agent baseline plays both roles


@dataclass
class Member:
    id: str
    role: str
    rank: int
    generation: int = 0
    parents: list[str] = field(default_factory=list)
    operator: str = "init"          # init or the evolution operator's name (operators.FAMILY)
    born_step: int = 0
    mu: float = ratings.MU
    sigma: float = ratings.SIGMA
    alive: bool = True
    adapter_dir: str = ""
    mlflow_run_id: str = ""

    @property
    def rating(self) -> ratings.Rating:
        return ratings.new(self.mu, self.sigma)

    @rating.setter
    def rating(self, value: ratings.Rating) -> None:
        self.mu, self.sigma = float(value.mu), float(value.sigma)

    def conservative(self, k: float) -> float:
        """``rating.conservative``: mu - k * sigma, k from ``evolution.conservative_k``."""
        return ratings.conservative(self.mu, self.sigma, k)

    def plays(self, role: str) -> bool:
        return self.role == role or self.role == BOTH

    def to_dict(self) -> dict:
        return asdict(self)


def ranked(members: list[Member], k: float) -> list[Member]:
    """Strongest first by ``mu - k * sigma``: evolution replaces the tail (a fork's shrink removes it too)."""
    return sorted(members, key=lambda m: m.conservative(k), reverse=True)


class Population:
    """All members ever created (dead ones kept for lineage), with id allocation per role."""

    PREFIX = {TEACHER: "T", STUDENT: "S", BOTH: "B"}

    def __init__(self, members: list[Member] | None = None, next_index: dict[str, int] | None = None):
        self.members: dict[str, Member] = {m.id: m for m in members or []}
        self.next_index = next_index or {}

    def new_id(self, role: str) -> str:
        prefix = self.PREFIX[role]
        i = self.next_index.get(prefix, 0)
        self.next_index[prefix] = i + 1
        return f"{prefix}{i}"

    def reserve(self, floor: dict[str, int]) -> None:
        """Raise the id counters to ``floor`` (``platform.family.floor``: the run family's numbering), so the ids
        given out next are ones no run of the family used.

        >>> pop = Population(next_index={"S": 3, "T": 2}); pop.reserve({"S": 5, "T": 1}); pop.new_id("student"), pop.new_id("teacher")
        ('S5', 'T2')
        """
        for prefix, index in floor.items():
            self.next_index[prefix] = max(self.next_index.get(prefix, 0), int(index))

    def add(self, member: Member) -> Member:
        self.members[member.id] = member
        return member

    def alive(self, role: str | None = None) -> list[Member]:
        return [m for m in self.members.values() if m.alive and (role is None or m.plays(role))]

    @property
    def teachers(self) -> list[Member]:
        return self.alive(TEACHER)

    @property
    def students(self) -> list[Member]:
        return self.alive(STUDENT)

    def __getitem__(self, member_id: str) -> Member:
        return self.members[member_id]

    def to_dict(self) -> dict:
        return {"members": [m.to_dict() for m in self.members.values()], "next_index": dict(self.next_index)}

    @classmethod
    def from_dict(cls, data: dict) -> "Population":
        return cls([Member(**m) for m in data["members"]], dict(data["next_index"]))
