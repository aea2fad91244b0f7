"""What a run's tasks look like: curriculum metrics (AST depth, cyclomatic complexity, lines, variables), their
tracker, diversity at equal volume, task sameness, the monitors' flags and the paper's figures.
"""
