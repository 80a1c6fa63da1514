"""Peak prediction (Koordinator pkg/koordlet/prediction): decaying histograms of usage per pod and per priority
class, checkpointed in the state dir, giving NodeMetric its prodReclaimableMetric."""
