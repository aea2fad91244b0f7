"""The store: MLflow tracking and the run layout (the contract between training, evaluation, the UI and the CLI), run
families and ancestry, sweeps' records, manifests, and the views of one run read from it.
"""
