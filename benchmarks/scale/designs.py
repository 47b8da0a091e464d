"""The two designs the scale benchmark runs side by side, as knob settings, and whether this build
of the engine has them.

- today: the star control plane through rank 0 over TCP and the full TCP mesh
  (HERRING_CONTROL_PLANE=tcp, HERRING_CONNECTIONS=mesh);
- hierarchical: HERRING_CONTROL_PLANE=auto (the default: shared memory per host + a tree among
  host leaders), HERRING_CONNECTIONS=lazy (connections on first use; the default is still the
  mesh, see its knob) and HERRING_RENDEZVOUS=host (the default: rendezvous per host).

A knob this build does not know is left out of the launch. A design that needs a knob the build
does not have (the hierarchical design needs HERRING_CONNECTIONS) is recorded as "not available
in this build" without launching; so is a launch the engine refuses naming one of the design's
knobs (a value it does not accept)."""

from hvd_herring import _native

DESIGNS = {
    "today": {"knobs": {"HERRING_CONTROL_PLANE": "tcp", "HERRING_CONNECTIONS": "mesh"}, "requires": [],
              "label": "today's design (star through rank 0, full mesh)"},
    "hierarchical": {"knobs": {"HERRING_CONNECTIONS": "lazy"}, "requires": ["HERRING_CONNECTIONS"],
                     "label": "hierarchical (shm per host + leader tree, lazy connections, per-host rendezvous)"},
}

# The knobs whose presence says which parts of the hierarchical design a build has.
DESIGN_KNOBS = ("HERRING_CONTROL_PLANE", "HERRING_CONNECTIONS")


def build_knobs():
    return {k["name"] for k in _native.KNOBS}


def availability(design, launch_anyway=False):
    """(env, None) to launch the design with, or (None, why it is not available in this build).
    launch_anyway: launch with the knobs the build has even if a required one is missing (say,
    the hierarchical control plane merged without HERRING_CONNECTIONS)."""
    known = build_knobs()
    spec = DESIGNS[design]
    missing = [k for k in spec["requires"] if k not in known]
    if missing and not launch_anyway:
        return None, (f"not available in this build: {', '.join(missing)} is not a knob of this engine "
                      f"(native/common/knobs.cc)")
    return {k: v for k, v in spec["knobs"].items() if k in known}, None


def refused_knob(design, error):
    """The design knob a failed launch's error names, if the engine refused its value."""
    if not error:
        return None
    for k in DESIGNS[design]["knobs"]:
        if k in error:
            return k
    return None
