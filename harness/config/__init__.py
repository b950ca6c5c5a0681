"""Settings: RunConfig and its YAML, the LoadGen TestSettings mapping, the backend registry, the host facts settings resolve against, the generated configuration reference."""
