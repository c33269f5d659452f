"""The two axes of channel information (Safaai et al.): task relevance vs local replaceability, lesions, pruning."""
