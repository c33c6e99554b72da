"""What is wrong with a catalog, each problem with where it is."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class CatalogProblem:
    pointer: str
    message: str
    line: int | None = None
    # For a problem inside an inline text (a policy's Cedar): its line in that text.
    text_line: int | None = None

    def __str__(self) -> str:
        where = f"line {self.line}: " if self.line else ""
        return f"{where}{self.pointer or '/'}: {self.message}"


class CatalogError(Exception):
    def __init__(self, source: str, problems: list[CatalogProblem]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(f"{source}: " + "; ".join(str(p) for p in problems))
