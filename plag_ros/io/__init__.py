"""Files: rosbag2 bags (read, write, the analysis output bag), CDR templates and npz."""
