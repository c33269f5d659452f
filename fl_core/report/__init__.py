"""The checkpoint report: weight statistics, checkpoint series, every analysis in one result, one offline HTML file."""
