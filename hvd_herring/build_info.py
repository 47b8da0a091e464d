"""What this installation's native libraries were built against.

The framework parts of the core are C++ compiled against one framework's headers: hvd_herring._torch_native
against a torch, libherring_tensorflow.so against a TensorFlow. Loaded into a process with another
version, their calls into the framework's C++ may not match it (a crash, not an error), so the
version they were built against is recorded at build time (setup.py writes hvd_herring/_build_info.py)
and compared before they are loaded.
"""

try:
    from hvd_herring._build_info import BUILT_AGAINST
except ImportError:  # built before the record existed (or a source tree never built): nothing to compare
    BUILT_AGAINST = {}


def built_against(framework):
    """The version of `framework` ("torch" or "tensorflow") the native part for it was built
    against, or None when unknown."""
    return BUILT_AGAINST.get(framework)


def mismatch(framework, running_version):
    """The built-against version if it differs from `running_version` (the framework in this
    process), else None."""
    built = built_against(framework)
    if built is None or str(built) == str(running_version):
        return None
    return built
