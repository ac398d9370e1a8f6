"""Ships ``gtcache-autoload.pth`` beside the packages (wheel and editable installs).

The ``.pth`` file is gtcache's start-up hook: it imports ``gtcache._autoload``
only when ``GTCACHE_DIR`` (or ``GTCACHE``) is set. Everything else is in pyproject.toml.
"""

import os

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "gtcache-autoload.pth"


class BuildPyWithPth(build_py):
    def run(self) -> None:
        super().run()
        self.copy_file(os.path.join("src", PTH), os.path.join(self.build_lib, PTH))

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), os.path.join(self.build_lib, PTH)]


setup(cmdclass={"build_py": BuildPyWithPth})
