"""NRI plugin: ttrpc over containerd/nri's multiplexed unix socket (``pkg/net/multiplex``).

``frames`` is the pure byte layer (mux frames and ttrpc messages); it knows nothing of protobuf.
"""
