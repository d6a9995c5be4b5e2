"""The figures: `Plot` and rendering (render), a run's set (run), the fabric's part (fabric), a map's
heatmaps (map)."""
