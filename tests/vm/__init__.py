"""The pure cgroup v2 suite: a guest VM (virtme-ng + Debian's kernel) that runs the ``cgroupv2`` tests.

The host boots hybrid (v1 controllers), so everything the agent does on a pure v2 kernel is proven in a
guest that shares the host's files: ``python -m tests.vm`` (``tox -e v2``) boots it once, runs
``pytest -m cgroupv2`` inside with this checkout and this interpreter, and brings the guest's junit file,
its per-test outcomes and its exit code back to the host.  :mod:`tests.vm.host` is the host side,
:mod:`tests.vm.guest` the guest side.
"""
