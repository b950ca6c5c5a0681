"""What is measured with: tensor datasets (QSL), prompt sets and their validators, the embedded demo model, file fingerprints."""
