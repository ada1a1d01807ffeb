"""Load the seed examples from examples/ (a folder of scripts, not a package)."""
import importlib.util
import os
import sys

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir,
                        "examples")


def load_example(name):
    """examples/<name>.py as a module, loaded once, under a name that cannot clash."""
    key = "_s2sgrad_example_" + name
    module = sys.modules.get(key)
    if module is None:
        path = os.path.normpath(os.path.join(EXAMPLES, name + ".py"))
        spec = importlib.util.spec_from_file_location(key, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return module
