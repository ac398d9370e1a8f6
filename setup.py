"""Ships ``gtcache-autoload.pth`` at the top of site-packages, in every install mode.

The ``.pth`` file is gtcache's start-up hook: it imports ``gtcache._autoload``
only when ``GTCACHE_DIR`` (or ``GTCACHE``) is set. Everything else is in pyproject.toml.

- Wheels (``pip install .``, ``python -m build``, a wheel built from the sdist):
  ``build_py`` copies the file to the root of ``build_lib``, the wheel's root.
- Editable wheels (``pip install -e .``, ``uv pip install -e .``): setuptools'
  ``editable_wheel`` runs ``build_py`` in editable mode and puts only its own
  finder (or path ``.pth``) into the wheel, not what ``build_py`` built; what it
  installs "as non editable" goes to ``install_lib``, the unpacked editable wheel.
  The file is copied there. (setuptools' finder ``.pth`` sorts before this one,
  so ``gtcache`` is importable when this one runs.)
"""

import os

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "gtcache-autoload.pth"


class BuildPyWithPth(build_py):
    def run(self) -> None:
        super().run()
        self.copy_file(os.path.join("src", PTH), self._pth_target())

    def _pth_target(self) -> str:
        if self.editable_mode:
            return os.path.join(self.get_finalized_command("install").install_lib, PTH)
        return os.path.join(self.build_lib, PTH)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), self._pth_target()]


setup(cmdclass={"build_py": BuildPyWithPth})
