"""The job system: launching ``populora train``/``eval`` detached, the one queue, the supervisor that runs a job, its
record, restarts, stops, heartbeats and liveness, the reaper, lost runs, and Ray Jobs.
"""
