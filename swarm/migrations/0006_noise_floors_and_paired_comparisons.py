"""Noise floors per target fingerprint (read by the web host, written by workers), paired
comparisons of two candidates measured on their target's worker, and what a promotion's
evidence holds."""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('swarm', '0005_candidate_status_invalid_input'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterField(
            model_name='promotion',
            name='evidence',
            field=models.JSONField(blank=True, default=dict, help_text='Extended validation and the speed verdict over the incumbent (a paired comparison).'),
        ),
        migrations.CreateModel(
            name='NoiseFloor',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('key', models.CharField(max_length=400, unique=True)),
                ('target', models.CharField(max_length=64)),
                ('workload', models.CharField(max_length=64)),
                ('shape_set', models.CharField(max_length=64)),
                ('fingerprint', models.JSONField(default=dict)),
                ('floor', models.FloatField(help_text='Fraction: 0.02 means ratios within [1/1.02, 1.02] are ties.')),
                ('entry', models.JSONField(default=dict)),
                ('measured_at', models.DateTimeField(default=django.utils.timezone.now)),
            ],
            options={
                'ordering': ['-measured_at', '-id'],
                'indexes': [models.Index(fields=['target', 'workload', 'shape_set', '-measured_at'], name='swarm_noise_target_d9167f_idx')],
            },
        ),
        migrations.CreateModel(
            name='PairedComparisonRun',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('workload', models.CharField(max_length=64)),
                ('target', models.CharField(max_length=64)),
                ('shape_set', models.CharField(max_length=64)),
                ('state', models.CharField(choices=[('queued', 'Queued'), ('running', 'Running'), ('done', 'Done'), ('failed', 'Failed')], default='queued', max_length=16)),
                ('result', models.JSONField(blank=True, default=dict)),
                ('error', models.TextField(blank=True)),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('started_at', models.DateTimeField(blank=True, null=True)),
                ('finished_at', models.DateTimeField(blank=True, null=True)),
                ('candidate_a', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='paired_as_a', to='swarm.candidate')),
                ('candidate_b', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='paired_as_b', to='swarm.candidate')),
                ('requested_by', models.ForeignKey(null=True, on_delete=django.db.models.deletion.SET_NULL, to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'ordering': ['-created_at', '-id'],
            },
        ),
    ]
