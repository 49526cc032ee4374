"""Clusters fork children may be placed on (issue #33), each implementing the core's `Cluster`
(core/fork/placement.py): `ray` runs them on a Ray cluster's nodes. Outside the core: the core
knows a cluster only through that protocol, and never imports these."""
