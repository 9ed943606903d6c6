"""The pure core: model, inventory, snapshot state, plan and gang. No I/O; clocks are injected."""
