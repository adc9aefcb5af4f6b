package status

import (
	"github.com/prometheus/client_golang/prometheus"
)

var (
	descFragments = prometheus.NewDesc("lanced_table_fragments", "Fragments in the table's latest version.", []string{"table"}, nil)
	descSmall     = prometheus.NewDesc("lanced_table_small_fragments", "Fragments with fewer physical rows than the table's target_rows_per_fragment.", []string{"table"}, nil)
	descMaxFiles  = prometheus.NewDesc("lanced_table_max_files_per_fragment", "Most data files any fragment of the table's latest version has.", []string{"table"}, nil)
	descDeleted   = prometheus.NewDesc("lanced_table_deleted_ratio", "Deleted rows divided by physical rows in the table's latest version.", []string{"table"}, nil)
	descUnindexed = prometheus.NewDesc("lanced_table_unindexed_rows", "Most live rows any index of the table does not cover (0 without indices).", []string{"table"}, nil)
	descVersions  = prometheus.NewDesc("lanced_table_versions", "Versions (manifests) the table keeps.", []string{"table"}, nil)
	descBytes     = prometheus.NewDesc("lanced_table_bytes", "Bytes of the data files of the table's latest version.", []string{"table"}, nil)
	descLastMaint = prometheus.NewDesc("lanced_table_last_maintenance_timestamp_seconds", "Unix time of lanced's last commit to the table seen by this process (0: none yet).", []string{"table"}, nil)
	descHeld      = prometheus.NewDesc("lanced_table_held", "1 while the table is held (after corruption was reported, or by an operator), else 0; read from the table's hold record.", []string{"table"}, nil)
	descDrift     = prometheus.NewDesc("lanced_index_drift_ratio", "Share of the vectors lanced's catch-ups added to the index with its trained model that were far from every centroid (beyond the 0.99 quantile of the indexed rows' distances); past the policy's drift_threshold a retrain is recommended.", []string{"table", "index"}, nil)
	descTables    = prometheus.NewDesc("lanced_tables", "Tables this process knows.", nil, nil)
)

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descFragments, descSmall, descMaxFiles, descDeleted, descUnindexed, descVersions, descBytes, descLastMaint, descHeld, descDrift, descTables} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: the per-table gauges from the
// last refresh of each table.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(descTables, prometheus.GaugeValue, float64(len(c.tables)))
	for uri, t := range c.tables {
		g := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, uri)
		}
		held := 0.0
		if t.Hold != nil {
			held = 1
		}
		g(descHeld, held)
		if t.Version == 0 {
			continue // never read successfully
		}
		g(descFragments, float64(t.Fragments))
		g(descSmall, float64(t.SmallFragments))
		g(descMaxFiles, float64(t.MaxFilesPerFragment))
		g(descDeleted, t.DeletedRatio)
		g(descUnindexed, float64(t.UnindexedRows))
		g(descVersions, float64(t.Versions))
		g(descBytes, float64(t.Bytes))
		var ts float64
		if lm := c.lastMaint[uri]; !lm.IsZero() {
			ts = float64(lm.UnixNano()) / 1e9
		}
		g(descLastMaint, ts)
		for name, r := range t.IndexDrift {
			ch <- prometheus.MustNewConstMetric(descDrift, prometheus.GaugeValue, r, uri, name)
		}
	}
}
