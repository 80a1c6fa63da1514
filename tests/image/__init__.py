"""The product's container image built offline (``python -m tests.image``, ``tox -e image``).

:mod:`tests.image.build` builds the top-level Containerfile on a Debian base made from the machine's own mirror
(buildah, no registry) and exports an OCI archive; :mod:`tests.image.smoke` runs the image's commands in a private
containerd; :mod:`tests.image.size` says how big the image is and what takes the space.
"""
