"""Maps the top-level code folders onto the ``oml`` namespace (docs/architecture.md, Layout).

``domain/`` installs as ``oml.domain``, ``services/`` as ``oml.services``,
``workers/`` as ``oml.workers`` and ``client/`` as ``oml.client``; every
sub-package found under them follows its parent.
"""
from setuptools import find_packages, setup

ROOTS = {"domain": "oml.domain", "services": "oml.services", "workers": "oml.workers", "client": "oml.client"}

packages, package_dir = [], {}
for folder, name in ROOTS.items():
    packages.append(name)
    package_dir[name] = folder
    packages += [f"{name}.{sub}" for sub in find_packages(folder)]

setup(
    packages=packages,
    package_dir=package_dir,
    package_data={"": ["*.sql", "*.html", "*.ini", "*.mako", "*.json"]},
    include_package_data=True,
)
