"""CPU and memory usage from successive kubelet scrapes: the store (`store.UsageStore`), the
rate code (`rates`) and the values it answers with (`values`).
"""
