"""Redaction of credentials in what Peon returns, keeps and logs: the detector (:mod:`.rules`), the
replacement and its counts (:mod:`.redactor`), the stream state that catches a secret split across
chunks (:mod:`.stream`) and where a session's own secrets come from (:mod:`.sources`). Pure but for
:mod:`.sources`, which reads the workspace's environment files."""
