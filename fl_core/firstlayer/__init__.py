"""The first layer (Chowers & Weiss): streaming patch statistics, energy profiles and the linear theory, whitening."""
