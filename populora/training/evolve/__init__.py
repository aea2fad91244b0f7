"""Evolution: replacing the weakest by children made in LoRA weight space (the operators, their catalogue and
statistics), the functional probe of a child, lineage, and resizing a population at a fork.
"""
