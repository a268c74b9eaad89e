"""vllm_broken.py: a deliberately wrong oscar_cov cache for the engine checks (vllm_plugin_check.py, vllm_loss_check.py),
which must catch it: share_window_slots() puts every request's BF16 sink and recent windows in the one scratch slot."""


def share_window_slots():
    from oscar_kv.vllm import backend
    build = backend.OscarCovMetadataBuilder.build

    def shared_slot(self, *a, **k):
        md = build(self, *a, **k)
        md.window_slot.fill_(self.max_num_seqs)
        md.window_slot_cpu = [self.max_num_seqs] * len(md.window_slot_cpu)
        return md
    backend.OscarCovMetadataBuilder.build = shared_slot
