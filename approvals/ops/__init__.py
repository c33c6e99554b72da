"""For the platform around Countersign, not for people: liveness and readiness
(health.py), Prometheus metrics (monitoring.py), the workers' and the sweeper's
heartbeats (heartbeats.py) and the URLs that serve them (views.py)."""
