"""Running plain Python functions as Spark tasks (classic or Spark Connect), and the workers' memory."""
