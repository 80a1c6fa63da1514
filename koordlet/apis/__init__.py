"""Koordinator API types koordlet reads and writes: QoS classes, priority bands, pods, quantities."""
