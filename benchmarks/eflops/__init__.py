"""The EFLOPS suite: topology-aware allreduce in a simulated two-group (BiGraph) cluster."""
