"""The embedding process: sessions (local, async, remote), results, configuration loading, spawning."""
