package shard

import (
	"sync"

	"github.com/lni/dragonboat/v4/logger"
	"github.com/rs/zerolog"
)

var loggingOnce sync.Once

// setupDragonboatLogging routes dragonboat's loggers into zerolog: errors
// only, or warnings too when Corvo logs at debug level (elections and
// dropped reads are routine). dragonboat allows one factory per process.
func setupDragonboatLogging(l zerolog.Logger) {
	level := logger.ERROR
	if l.GetLevel() <= zerolog.DebugLevel {
		level = logger.WARNING
	}
	loggingOnce.Do(func() {
		logger.SetLoggerFactory(func(pkg string) logger.ILogger {
			return &dbLogger{l: l.With().Str("component", "raft").Str("pkg", pkg).Logger(), level: level}
		})
	})
}

type dbLogger struct {
	mu    sync.Mutex
	l     zerolog.Logger
	level logger.LogLevel
}

func (d *dbLogger) SetLevel(lv logger.LogLevel) {
	d.mu.Lock()
	d.level = lv
	d.mu.Unlock()
}

func (d *dbLogger) enabled(lv logger.LogLevel) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return lv <= d.level
}

func (d *dbLogger) Debugf(f string, a ...interface{}) {
	if d.enabled(logger.DEBUG) {
		d.l.Debug().Msgf(f, a...)
	}
}
func (d *dbLogger) Infof(f string, a ...interface{}) {
	if d.enabled(logger.INFO) {
		d.l.Info().Msgf(f, a...)
	}
}
func (d *dbLogger) Warningf(f string, a ...interface{}) {
	if d.enabled(logger.WARNING) {
		d.l.Warn().Msgf(f, a...)
	}
}
func (d *dbLogger) Errorf(f string, a ...interface{}) {
	if d.enabled(logger.ERROR) {
		d.l.Error().Msgf(f, a...)
	}
}
func (d *dbLogger) Panicf(f string, a ...interface{}) { d.l.Panic().Msgf(f, a...) }
