def sampler_meets_broadcast(): return {}
