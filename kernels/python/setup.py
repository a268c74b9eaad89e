"""setup.py: `pip install kernels/python` copies the built kernels into the package.

The wheel carries liboscar_kernels.so and the oscar-rotate tool (what oscar_kv.hf.calibrate runs) from the build
this tree made, so an installed copy needs neither the source tree nor environment variables. The build is
OSCAR_BUILD when set, else the newest build folder of this tree (any name: a folder holding
kernels/liboscar_kernels.so). Without one the package installs without the kernels and says so; the argument
checks still work and oscar_kv then looks for the library as _capi.default_library_path() says."""
import os
import shutil
import sys
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
TREE = HERE.parents[1]
LIB = "liboscar_kernels.so"
TOOLS = ("oscar-rotate",)


def find_build():
    """The build folder whose kernels this package carries, or None."""
    if os.environ.get("OSCAR_BUILD"):
        b = Path(os.environ["OSCAR_BUILD"]).resolve()
        if not (b / "kernels" / LIB).is_file():
            sys.exit(f"oscar-kv setup: error: {b}: OSCAR_BUILD has no kernels/{LIB}; build it "
                     f"(cmake --build {b} --target oscar_kernels_shared) or unset OSCAR_BUILD")
        return b
    found = [p.parent.parent for p in TREE.glob(f"*/kernels/{LIB}")]
    return max(found, key=lambda b: (b / "kernels" / LIB).stat().st_mtime) if found else None


class BuildWithKernels(build_py):
    def run(self):
        super().run()
        build = find_build()
        dest = Path(self.build_lib) / "oscar_kv"
        if build is None:
            print(f"oscar-kv setup: no {LIB} under {TREE}/*/kernels/: installing without the kernels; build them "
                  "(bash .ci/setup) and reinstall, or set OSCAR_KERNELS_LIB at run time", file=sys.stderr)
            return
        shutil.copy2(build / "kernels" / LIB, dest / LIB)
        for tool in TOOLS:
            src = build / "apps" / tool
            if src.is_file():
                (dest / "bin").mkdir(exist_ok=True)
                shutil.copy2(src, dest / "bin" / tool)
        print(f"oscar-kv setup: the package carries {LIB} and {', '.join(TOOLS)} from {build}", file=sys.stderr)


class BinaryDistribution(Distribution):
    def has_ext_modules(self):  # a platform wheel: it carries a compiled library
        return True


setup(cmdclass={"build_py": BuildWithKernels}, distclass=BinaryDistribution)
