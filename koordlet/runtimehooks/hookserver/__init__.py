"""The RuntimeHookService gRPC server (``runtime.v1alpha1``) that koord-runtime-proxy calls, and the
hook-server registration file it reads (Koordinator ``runtimehooks/proxyserver``)."""
