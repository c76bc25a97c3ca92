"""Operations: health, metrics, logs, configuration checks, progress lines."""
