"""Runtime hooks: the resources a container should start with, answered to containerd over NRI, to the
runtime proxy over the RuntimeHookService, and re-applied by a reconciler (Koordinator ``runtimehooks``)."""
