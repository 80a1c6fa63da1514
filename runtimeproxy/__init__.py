"""koord-runtime-proxy: a CRI proxy between kubelet and containerd that calls koordlet's runtime hooks.

It depends only on its own code and on generated protocol stubs, never on the rest of koordlet, so it
stays a thin process that is safe to sit on every container operation of the node.
"""
